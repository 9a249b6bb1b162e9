"""The command line: output modes, exit codes 0/1/2, and every bad-input case of the issue."""

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from verl_migrate import files
from verl_migrate.cli import main
from verl_migrate.errors import MigrationError

OLD = textwrap.dedent(
    """\
    # run config
    actor_rollout_ref:
      rollout:
        height: 256  # px
        extra_configs:
          noise_level: 1.2
      actor:
        clip_ratio: 0.0001
    reward:
      reward_manager:
        name: visual
    my_team:
      owner: alice
    """
)


def _read(path) -> str:
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def _write(tmp_path, name: str, text: str | bytes) -> str:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return str(p)


def test_stdout_is_the_migrated_yaml(tmp_path, capsys) -> None:
    path = _write(tmp_path, "old.yaml", OLD)
    assert main([path]) == 0
    out = capsys.readouterr().out
    assert "pipeline:\n      height: 256  # px" in out
    assert "name: VisualRewardManager" in out
    assert "my_team:\n  owner: alice" in out  # unknown keys kept verbatim
    assert _read(path) == OLD


def test_output_file(tmp_path, capsys) -> None:
    path, out = _write(tmp_path, "old.yaml", OLD), str(tmp_path / "new.yaml")
    assert main([path, "-o", out]) == 0
    assert "diffusion_loss:" in _read(out)
    assert capsys.readouterr().out == ""


def test_in_place_keeps_a_backup_and_the_mode(tmp_path) -> None:
    path = _write(tmp_path, "old.yaml", OLD)
    os.chmod(path, 0o640)
    assert main(["-i", path]) == 0
    assert _read(path + ".bak") == OLD
    assert "algo:" in _read(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["old.yaml", "old.yaml.bak"]


def test_in_place_no_backup(tmp_path) -> None:
    path = _write(tmp_path, "old.yaml", OLD)
    assert main(["-i", "--no-backup", path]) == 0
    assert os.listdir(tmp_path) == ["old.yaml"]


def test_in_place_interrupted_leaves_the_file_whole(tmp_path, monkeypatch) -> None:
    path = _write(tmp_path, "old.yaml", OLD)

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main(["-i", path])
    assert _read(path) == OLD
    assert os.listdir(tmp_path) == ["old.yaml"]


def test_in_place_in_a_read_only_folder_names_the_folder(tmp_path, monkeypatch, capsys) -> None:
    import errno
    import tempfile

    path = _write(tmp_path, "old.yaml", OLD)

    def refused(*args, dir=None, **kwargs):  # what mkstemp raises in a folder without write permission
        raise PermissionError(errno.EACCES, "Permission denied", os.path.join(dir, ".old.yaml.x.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refused)  # root ignores chmod, so the refusal is injected
    assert main(["-i", path]) == 2
    err = capsys.readouterr().err
    folder = os.path.realpath(tmp_path)
    assert (
        f"old.yaml: cannot write: permission denied; -i writes a temp file next to the file, so the folder {folder}"
        in err
    )
    assert "file left unchanged" in err
    assert _read(path) == OLD and os.listdir(tmp_path) == ["old.yaml"]


def test_diff(tmp_path, capsys) -> None:
    path = _write(tmp_path, "old.yaml", OLD)
    assert main(["--diff", path]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"--- a/{path}\n+++ b/{path}\n")
    assert "-    height: 256  # px\n" in out and "+      height: 256  # px\n" in out


def test_check_exit_codes(tmp_path, capsys) -> None:
    old = _write(tmp_path, "old.yaml", OLD)
    assert main(["--check", old]) == 1
    assert "would migrate" in capsys.readouterr().err
    assert _read(old) == OLD
    assert main(["-i", old]) == 0
    assert main(["--check", old]) == 0  # already migrated: nothing to do


def test_already_migrated_is_untouched(tmp_path) -> None:
    path = _write(tmp_path, "new.yaml", "actor_rollout_ref:\n  rollout:\n    pipeline:\n      height: 256\n")
    before = os.stat(path).st_mtime_ns
    assert main(["-i", path]) == 0
    assert os.stat(path).st_mtime_ns == before and not os.path.exists(path + ".bak")


def test_report_json_lists_changes_unknown_keys_and_semantics(tmp_path) -> None:
    path, rep = _write(tmp_path, "old.yaml", OLD), str(tmp_path / "r.json")
    assert main(["--check", "--report", "json", "--report-file", rep, path]) == 1
    (data,) = json.loads(_read(rep))["files"]
    rules = {c["rule_id"] for c in data["changes"]}
    assert {"rollout-height-to-pipeline", "rollout-extra-configs-split", "reward-manager-visual"} <= rules
    unknown = [f["path"] for f in data["findings"] if f["category"] == "unknown"]
    assert unknown == ["my_team.owner"]
    assert any(
        f["category"] == "semantic" and f["rule_id"] == "val-noise-level-inherits-train" for f in data["findings"]
    )
    assert data["changes"][0]["line"] is not None


def test_report_text(tmp_path, capsys) -> None:
    path = _write(tmp_path, "old.yaml", OLD)
    assert main(["--check", "--report", "text", path]) == 1
    err = capsys.readouterr().err
    assert "move          actor_rollout_ref.rollout.height -> actor_rollout_ref.rollout.pipeline.height" in err
    assert "unknown: my_team.owner line 13" in err


def test_directory_walk(tmp_path, capsys) -> None:
    _write(tmp_path, "a/one.yaml", OLD)
    _write(tmp_path, "a/b/two.yml", OLD)
    _write(tmp_path, "a/run.sh", "python3 -m verl.trainer.main_flowgrpo actor_rollout_ref.rollout.height=256\n")
    _write(tmp_path, "a/notes.txt", OLD)
    _write(tmp_path, "a/.hidden/three.yaml", OLD)
    _write(tmp_path, "a/list.yaml", "- a\n- b\n")  # not a config: skipped when found by walking
    assert main(["-i", "--no-backup", str(tmp_path / "a")]) == 0
    assert "pipeline" in (tmp_path / "a/one.yaml").read_text()
    assert "pipeline" in (tmp_path / "a/b/two.yml").read_text()
    assert (
        (tmp_path / "a/run.sh")
        .read_text()
        .startswith("python3 -m verl_omni.trainer.main_diffusion actor_rollout_ref.rollout.pipeline.height=256 ")
    )
    assert (tmp_path / "a/notes.txt").read_text() == OLD
    assert (tmp_path / "a/.hidden/three.yaml").read_text() == OLD


def test_several_inputs_need_a_mode(tmp_path, capsys) -> None:
    a, b = _write(tmp_path, "a.yaml", OLD), _write(tmp_path, "b.yaml", OLD)
    assert main([a, b]) == 2
    assert main([a, b, "-o", str(tmp_path / "c.yaml")]) == 2
    assert "several inputs" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a:\n  b: [1, 2\nc: 3\n", r"bad\.yaml:\d+:\d+: invalid YAML"),
        ("a:\n\tb: 1\n", r"bad\.yaml:2:1: invalid YAML"),
        ("a: 1\nb: 2\na: 3\n", r"bad\.yaml:3:1: invalid YAML: duplicate key.*\"a\""),
        ("- a\n- b\n", r"bad\.yaml:1: the top level is a list, not a mapping"),
        ("just a string\n", r"the top level is a str, not a mapping"),
        ("a: 1\n---\nb: 2\n", r"bad\.yaml:2:1: invalid YAML: .*single document"),
        (
            "a:\n  b:\n    c: 1\n   d: 2\n",
            r"bad\.yaml:4:4: invalid YAML: while parsing a block mapping \(from line 2\), expected <block end>",
        ),
    ],
    ids=["unclosed-flow", "tab-indent", "duplicate-key", "list-root", "scalar-root", "two-documents", "bad-indent"],
)
def test_bad_yaml_exit_2_and_file_untouched(tmp_path, capsys, text, match) -> None:
    path = _write(tmp_path, "bad.yaml", text)
    assert main(["-i", path]) == 2
    err = capsys.readouterr().err
    import re

    assert re.search(match, err), err
    assert _read(path) == text and os.listdir(tmp_path) == ["bad.yaml"]


def test_binary_file(tmp_path, capsys) -> None:
    path = _write(tmp_path, "model.yaml", b"\x89PNG\r\n\x1a\n\x00\x00")
    assert main([path]) == 2
    assert "binary file (NUL byte at offset 8)" in capsys.readouterr().err


def test_non_utf8_file(tmp_path, capsys) -> None:
    path = _write(tmp_path, "latin1.yaml", "a:\n  b: caf\xe9\n".encode("latin-1"))
    assert main([path]) == 2
    assert "latin1.yaml:2: not UTF-8 (byte 0xe9 at offset 11)" in capsys.readouterr().err


def test_missing_file(tmp_path, capsys) -> None:
    assert main([str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs Linux /proc")
def test_unreadable_file() -> None:
    with pytest.raises(MigrationError, match="cannot read"):
        files.read_text("/proc/self/mem")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files without read permission")
def test_permission_denied(tmp_path, capsys) -> None:
    path = _write(tmp_path, "secret.yaml", OLD)
    os.chmod(path, 0)
    assert main([path]) == 2
    assert "permission denied" in capsys.readouterr().err


def test_a_file_given_twice_is_migrated_once(tmp_path, capsys) -> None:
    path = _write(tmp_path, "cfg/a.yaml", OLD)
    assert main(["--diff", str(tmp_path / "cfg"), path, os.path.join(str(tmp_path), "cfg", ".", "a.yaml")]) == 0
    assert capsys.readouterr().out.count("+++ b/") == 1


def test_symlink_loop_in_directory(tmp_path, capsys) -> None:
    _write(tmp_path, "cfg/a.yaml", OLD)
    os.symlink(str(tmp_path / "cfg"), str(tmp_path / "cfg" / "loop"))
    os.symlink("self", str(tmp_path / "cfg" / "self.yaml"))
    assert main(["-i", "--no-backup", str(tmp_path / "cfg")]) == 2
    err = capsys.readouterr().err
    assert "symlink loop" in err and "self.yaml" in err
    assert "pipeline" in (tmp_path / "cfg/a.yaml").read_text()  # the rest was still migrated


def test_conflicting_old_and_new_keys(tmp_path, capsys) -> None:
    text = "actor_rollout_ref:\n  rollout:\n    height: 256\n    pipeline:\n      height: 512\n"
    path = _write(tmp_path, "c.yaml", text)
    assert main(["-i", path]) == 2
    err = capsys.readouterr().err
    assert (
        "c.yaml:3: `actor_rollout_ref.rollout.height` (256) and `actor_rollout_ref.rollout.pipeline.height` (512)"
        in err
    )
    assert _read(path) == text


def test_equal_old_and_new_keys_merge(tmp_path, capsys) -> None:
    text = "actor_rollout_ref:\n  rollout:\n    height: 256\n    pipeline:\n      height: 256\n"
    assert main([_write(tmp_path, "c.yaml", text)]) == 0
    assert capsys.readouterr().out == "actor_rollout_ref:\n  rollout:\n    pipeline:\n      height: 256\n"


def test_key_in_an_aliased_mapping_that_must_move_is_refused(tmp_path, capsys) -> None:
    text = (
        "actor_rollout_ref:\n  rollout:\n    extra_configs: &ec\n      noise_level: 1.2\n"
        "    val_kwargs:\n      extra_configs: *ec\n"
    )
    path = _write(tmp_path, "a.yaml", text)
    assert main(["-i", path]) == 2
    assert "a.yaml:3: key `noise_level` has to move, but it sits in `&ec`, which is also used through an alias" in (
        capsys.readouterr().err
    )
    assert _read(path) == text and os.listdir(tmp_path) == ["a.yaml"]


def test_yaml_merge_key_that_must_move_is_refused(tmp_path, capsys) -> None:
    text = "size: &s\n  height: 256\nactor_rollout_ref:\n  rollout:\n    <<: *s\n    n: 2\n"
    path = _write(tmp_path, "m.yaml", text)
    assert main([path]) == 2
    assert "comes from a YAML merge" in capsys.readouterr().err


def test_only_skip_and_unknown_rule_ids(tmp_path, capsys) -> None:
    path = _write(tmp_path, "old.yaml", OLD)
    assert main(["--only", "reward-manager-visual", path]) == 0
    out = capsys.readouterr().out
    assert "VisualRewardManager" in out and "height: 256" in out and "pipeline" not in out
    assert main(["--skip", "reward-manager-visual,rollout-extra-configs-split", path]) == 0
    out = capsys.readouterr().out
    assert "name: visual" in out and "extra_configs" in out and "pipeline" in out
    assert main(["--only", "no-such-rule", path]) == 2
    assert "unknown rule id 'no-such-rule'" in capsys.readouterr().err


def test_list_rules(capsys) -> None:
    from verl_migrate.rules import all_rules

    assert main(["--list-rules"]) == 0
    out = capsys.readouterr().out
    assert all(r.id in out for r in all_rules())


def test_crlf_line_endings_kept(tmp_path, capsys) -> None:
    path = _write(tmp_path, "w.yaml", OLD.replace("\n", "\r\n").encode())
    assert main(["-i", "--no-backup", path]) == 0
    with open(path, "rb") as fh:
        data = fh.read()
    assert b"pipeline:\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")


def test_mixed_line_endings_with_nothing_to_migrate_are_untouched(tmp_path, capsys) -> None:
    raw = b"trainer:\r\n  nnodes: 1\n  total_epochs: 2\r\n"
    path = _write(tmp_path, "mixed.yaml", raw)
    assert main(["--check", path]) == 0
    assert main(["-i", "--no-backup", path]) == 0
    with open(path, "rb") as fh:
        assert fh.read() == raw


def test_script_flag_and_sniffing(tmp_path, capsys) -> None:
    path = _write(tmp_path, "launch", "python3 -m verl.trainer.main_flowgrpo algorithm.adv_estimator=flow_grpo\n")
    assert main([path]) == 0
    assert capsys.readouterr().out == (
        "python3 -m verl_omni.trainer.main_diffusion actor_rollout_ref.model.algorithm=flow_grpo "
        "actor_rollout_ref.model.lora_rank=32 actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps=40\n"
    )


def test_report_file_that_cannot_be_written(tmp_path, capsys) -> None:
    path = _write(tmp_path, "old.yaml", OLD)
    rep = str(tmp_path / "missing" / "r.json")
    assert main(["--check", "--report", "json", "--report-file", rep, path]) == 2
    assert f"{rep}: cannot write the report: No such file or directory" in capsys.readouterr().err


def test_closed_stdout_exits_without_traceback(tmp_path) -> None:
    path = _write(tmp_path, "old.yaml", OLD)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write, as with `... | head -0`
    try:
        res = subprocess.run(
            [sys.executable, "-m", "verl_migrate", "--diff", path],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr, res.stderr


def test_console_script_and_module_entry(tmp_path) -> None:
    path = _write(tmp_path, "old.yaml", OLD)
    res = subprocess.run(
        [sys.executable, "-m", "verl_migrate", "--check", path], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 1 and "would migrate" in res.stderr
    res = subprocess.run([sys.executable, "-m", "verl_migrate", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "exit codes:" in res.stdout


def test_unknown_keys_inside_dropped_subtrees_are_kept(tmp_path, capsys) -> None:
    text = "critic:\n  strategy: fsdp\n  my_note: keep me\ntrainer:\n  critic_warmup: 0\n"
    assert main(["--report", "text", _write(tmp_path, "k.yaml", text)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "critic:\n  my_note: keep me\n"
    assert "unknown: critic.my_note line 3" in captured.err


def test_in_place_through_a_symlink_rewrites_the_target(tmp_path) -> None:
    target = _write(tmp_path, "real/old.yaml", OLD)
    link = tmp_path / "link.yaml"
    os.symlink(target, str(link))
    assert main(["-i", str(link)]) == 0
    assert os.path.islink(str(link)) and "pipeline:" in _read(target)
    assert _read(str(link) + ".bak") == OLD


def test_config_group_files_by_header_or_option(tmp_path, capsys) -> None:
    header = _write(
        tmp_path,
        "rollout/mine.yaml",
        "# @package actor_rollout_ref.rollout\ndefaults:\n  - rollout\n  - _self_\nheight: 256\n",
    )
    assert main([header]) == 0
    # verl-omni's diffusion rollout group has no LLM `rollout` option to layer on
    assert capsys.readouterr().out == (
        "# @package actor_rollout_ref.rollout\ndefaults:\n  - _self_\npipeline:\n  height: 256\n"
    )
    plain = _write(
        tmp_path, "model/mine.yaml", "lora_rank: 8\nheight: ${oc.select:actor_rollout_ref.rollout.height,512}\n"
    )
    assert main(["--package", "actor_rollout_ref.model", plain]) == 0
    assert capsys.readouterr().out == (
        "lora_rank: 8\npipeline:\n  height: ${oc.select:actor_rollout_ref.rollout.pipeline.height,512}\n"
    )


def test_config_group_file_cannot_move_keys_outside_its_package(tmp_path, capsys) -> None:
    path = _write(tmp_path, "rollout/skip.yaml", "skip:\n  enable: true\n")
    assert main(["--package", "actor_rollout_ref.rollout", path]) == 2
    assert "would move `skip` outside its package" in capsys.readouterr().err


def test_standard_input(monkeypatch, capsys) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("actor_rollout_ref:\n  rollout:\n    width: 64\n"))
    assert main(["-"]) == 0
    assert capsys.readouterr().out == "actor_rollout_ref:\n  rollout:\n    pipeline:\n      width: 64\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO("a: 1\n"))
    assert main(["-i", "-"]) == 2
    assert "-i cannot rewrite standard input" in capsys.readouterr().err
