"""Run the selected rules over a document, rewrite interpolations, and report unknown and obsolete keys."""

from __future__ import annotations

from collections.abc import Iterable

from verl_migrate import interp
from verl_migrate.doc import Doc
from verl_migrate.keys import head_defaults, is_head_key, is_old_key, same_value
from verl_migrate.report import Change
from verl_migrate.rules import Rule, all_rules

#: verl-omni key prefixes whose features this project does not implement yet (reported when switched on)
NOT_IMPLEMENTED = {
    "distillation.": "diffusion distillation",
    "transfer_queue.": "the TransferQueue-based V1 trainer",
    "trainer.use_v1": "the V1 trainer",
    "trainer.v1.": "the V1 trainer",
    "skip.": "rollout dump/skip",
    "actor_rollout_ref.rollout.disaggregation.": "prefill/decode disaggregation",
    "actor_rollout_ref.model.mtp.": "multi-token prediction",
    "actor_rollout_ref.actor.use_distill_loss": "distillation losses",
}


def select_rules(fmt: str, only: Iterable[str] | None = None, skip: Iterable[str] | None = None) -> list[Rule]:
    """Return the rules for documents of format `fmt`, filtered by `--only` / `--skip` ids."""
    rules = all_rules()
    known = {r.id for r in rules}
    for rid in list(only or ()) + list(skip or ()):
        if rid not in known:
            raise KeyError(f"unknown rule id {rid!r}; `verl-migrate-config --list-rules` lists the ids")
    only_set, skip_set = set(only or ()), set(skip or ())
    return [r for r in rules if fmt in r.formats and (not only_set or r.id in only_set) and r.id not in skip_set]


def run(doc: Doc, rules: list[Rule]) -> None:
    """Apply `rules` to `doc`, rewrite `${...}` references to moved keys, and add findings to `doc.report`."""
    for rule in rules:
        if rule.fits_target():
            rule.apply(doc)
    if doc.is_legacy():
        for path, message, rule_id, line in doc.pending:
            doc.report.find("semantic", path, message, rule_id=rule_id, line=line)
    _rewrite_interpolations(doc, rules)
    _scan_keys(doc)


def _rewrite_interpolations(doc: Doc, rules: list[Rule]) -> None:
    mapping = [(old, new, r.id) for r in rules for old, new in r.path_map()]
    for path, text, handle in list(doc.strings()):
        new, done = interp.rewrite(text, mapping)
        if done:
            doc.replace_string(handle, new)
            doc.report.add(Change(done[0][2], "interpolation", path, old=text, new=new, line=doc.line(path)))
    for path, text, _ in doc.strings():
        for ref, has_default in interp.references(text):
            if not has_default and not doc.has(ref) and not is_head_key(ref):
                doc.report.find("warning", path, f"interpolation references `{ref}`, which verl-omni does not have")


def _suggest(path: str) -> str:
    import difflib

    parent, _, name = path.rpartition(".")
    siblings = {k[len(parent) + 1 :].split(".")[0] for k in head_defaults() if k.startswith(parent + ".")}
    close = difflib.get_close_matches(name, sorted(siblings), n=1, cutoff=0.75)
    return f"; did you mean `{parent}.{close[0]}`?" if close else ""


def _scan_keys(doc: Doc) -> None:
    for path in doc.deletions():
        if not is_head_key(path):
            doc.report.find(
                "unknown",
                "~" + path,
                "deletes a key verl-omni's diffusion_trainer does not have; Hydra will refuse it" + _suggest(path),
                line=doc.line(path),
            )
    for path, value in doc.items():
        if path.split(".")[0] in ("defaults", "hydra"):
            continue
        if is_head_key(path):
            for prefix, feature in NOT_IMPLEMENTED.items():
                if not path.startswith(prefix):
                    continue
                dflt = head_defaults().get(path)
                if not (dflt is not None and same_value(value, dflt)):
                    doc.report.find(
                        "not-implemented",
                        path,
                        f"{feature} is not implemented by this project's verl-omni yet",
                        line=doc.line(path),
                    )
            continue
        if is_old_key(path):
            doc.report.find(
                "obsolete", path, "old verl key with no verl-omni equivalent; kept verbatim", line=doc.line(path)
            )
        else:
            doc.report.find(
                "unknown",
                path,
                "not a verl-omni diffusion_trainer key; kept verbatim" + _suggest(path),
                line=doc.line(path),
            )
