"""`PromptDataset`: parquet / jsonl / txt / built-in rows, chat-list prompts, negative prompts, bad inputs."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_omni.data import BUILTIN_PROMPT_SETS, DataConfig, DataError, DataFileNotFoundError, PromptDataset

SYSTEM = "Describe the image by detailing the color, shape, size:"


def _ocr_parquet(path, n=3):
    """Rows in the layout of verl's qwenimage_ocr.py: chat-list prompts, negative prompts, nested ground truth."""
    rows = [
        {
            "data_source": "flow_grpo/ocr",
            "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f'A sign that says "w{i}"'}],
            "negative_prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": " "}],
            "ability": "ocr",
            "reward_model": {"style": "model", "ground_truth": f"w{i}"},
            "extra_info": {"split": "train", "index": i},
        }
        for i in range(n)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_parquet_chat_list_prompt_negative_prompt_and_reward_columns(tmp_path):
    ds = PromptDataset.from_files(str(_ocr_parquet(tmp_path / "train.parquet")))
    assert len(ds) == 3
    r = ds[2]
    assert r.prompt == 'A sign that says "w2"'  # the user message; the system message is dropped
    assert r.negative_prompt == " "
    assert r.data_source == "flow_grpo/ocr"
    assert r.ground_truth == "w2"  # from reward_model.ground_truth
    assert r.extra_info == {"split": "train", "index": 2}
    assert r.index == 2 and r.source.endswith("train.parquet:2")
    assert ds.columns[str(tmp_path / "train.parquet")][:3] == ["data_source", "prompt", "negative_prompt"]


def test_jsonl_string_prompts_top_level_ground_truth_and_default_data_source(tmp_path):
    path = tmp_path / "p.jsonl"
    lines = [
        {"prompt": "a red cube", "ground_truth": "red"},
        {"prompt": "a blue ball", "data_source": "jpeg_incompressibility", "negative_prompt": "blurry"},
        {"prompt": "a green cone", "data_source": None},
    ]
    path.write_text(json.dumps(lines[0]) + "\n\n" + "\n".join(json.dumps(x) for x in lines[1:]) + "\n")
    ds = PromptDataset.from_files(str(path), default_data_source="jpeg_compressibility")
    assert [r.prompt for r in ds] == ["a red cube", "a blue ball", "a green cone"]
    assert [r.data_source for r in ds] == ["jpeg_compressibility", "jpeg_incompressibility", "jpeg_compressibility"]
    assert [r.negative_prompt for r in ds] == [None, "blurry", None]
    assert ds[0].ground_truth == "red" and ds[1].ground_truth is None and ds[1].extra_info == {}
    assert ds[1].source.endswith("p.jsonl:3")  # 1-based line, the blank line counted


def test_txt_one_prompt_a_line_any_prompt_key(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("a cat\n\n  \na dog on a hill\n")
    ds = PromptDataset.from_files(str(path), prompt_key="caption")
    assert [r.prompt for r in ds] == ["a cat", "a dog on a hill"]
    assert all(r.data_source is None and r.negative_prompt is None for r in ds)


def test_builtin_set_needs_no_files_and_routes_to_jpeg():
    ds = PromptDataset.from_config(DataConfig(), "train")  # default: builtin://quickstart
    assert len(ds) == len(BUILTIN_PROMPT_SETS["quickstart"]) >= 24
    assert {r.data_source for r in ds} == {"jpeg_compressibility"}
    val = PromptDataset.from_config(DataConfig(val_files="builtin://quickstart_val"), "val")
    assert not {r.prompt for r in val} & {r.prompt for r in ds}


def test_file_list_is_concatenated_in_order_and_max_samples_cuts(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("first\nsecond\n")
    parquet = _ocr_parquet(tmp_path / "b.parquet", n=4)
    cfg = DataConfig(train_files=[str(txt), str(parquet)], train_max_samples=5, default_data_source="x")
    ds = PromptDataset.from_config(cfg, "train")
    assert [r.index for r in ds] == [0, 1, 2, 3, 4]
    assert [r.prompt for r in ds][:3] == ["first", "second", 'A sign that says "w0"']
    assert ds[0].data_source == "x" and ds[2].data_source == "flow_grpo/ocr"


def test_expands_user_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "p.txt").write_text("a prompt\n")
    assert PromptDataset.from_files("~/p.txt")[0].prompt == "a prompt"


def test_missing_file_names_key_and_path(tmp_path):
    cfg = DataConfig(val_files=str(tmp_path / "nope.parquet"))
    with pytest.raises(DataFileNotFoundError, match=r"data\.val_files: no such file: .*nope\.parquet"):
        PromptDataset.from_config(cfg, "val")


def test_missing_prompt_column_lists_columns_found(tmp_path):
    path = _ocr_parquet(tmp_path / "t.parquet")
    with pytest.raises(
        DataError,
        match=r"data\.train_files: .*t\.parquet has no prompt column 'text'.*columns found: "
        r"data_source, prompt, negative_prompt",
    ):
        PromptDataset.from_config(DataConfig(train_files=str(path), prompt_key="text"), "train")


def test_unknown_extension_is_a_config_error_naming_the_key():
    with pytest.raises(ValueError, match=r"train_files: expected files ending in .parquet, .jsonl, .txt.*'\.csv'"):
        DataConfig(train_files=["a.txt", "b.csv"])
    with pytest.raises(DataError, match=r"data\.val_files: b\.csv has extension '\.csv'"):
        PromptDataset.from_files("b.csv", key="data.val_files")


def test_bad_rows_name_file_and_line(tmp_path):
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2 is not valid JSON"):
        PromptDataset.from_files(str(bad_json))
    no_user = tmp_path / "nouser.jsonl"
    no_user.write_text(json.dumps({"prompt": [{"role": "system", "content": "x"}]}) + "\n")
    with pytest.raises(DataError, match=r"prompt in .*nouser\.jsonl:1: the chat list has no 'user' message"):
        PromptDataset.from_files(str(no_user))
    number = tmp_path / "num.jsonl"
    number.write_text(json.dumps({"prompt": 3}) + "\n")
    with pytest.raises(DataError, match=r"num\.jsonl:1: expected a string or a list"):
        PromptDataset.from_files(str(number))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(DataError, match=r"holds no prompt rows"):
        PromptDataset.from_files(str(empty))


def test_val_files_null_means_no_validation_set():
    with pytest.raises(ValueError, match=r"data\.val_files is null"):
        PromptDataset.from_config(DataConfig(), "val")


def test_unknown_builtin_set_lists_known():
    with pytest.raises(ValueError, match=r"unknown built-in prompt set 'builtin://nope'; known: builtin://quickstart"):
        PromptDataset.from_files("builtin://nope")
