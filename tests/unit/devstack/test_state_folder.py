"""Where processes write when no variable says otherwise: the checkout's var/, an absolute
path, whatever folder a process starts in; make run uses the same one."""

from __future__ import annotations

from pathlib import Path

from support.paths import REPO_ROOT

from turnpike.config import BillingSettings, TokenizerSettings
from turnpike.devstack.__main__ import config_from_args, parse_args

CHECKOUT = REPO_ROOT


def test_defaults_are_under_the_checkouts_state_folder_from_any_working_folder(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TURNPIKE_VOCAB_DIR", raising=False)
    monkeypatch.delenv("TURNPIKE_BILLING_LEDGER", raising=False)
    assert Path(TokenizerSettings().vocab_dir) == CHECKOUT / "var" / "vocab"
    assert Path(BillingSettings().ledger_path) == CHECKOUT / "var" / "billing" / "ledger.sqlite3"


def test_make_run_uses_the_same_state_folder_and_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TURNPIKE_VOCAB_DIR", raising=False)
    monkeypatch.delenv("TURNPIKE_BILLING_LEDGER", raising=False)
    config = config_from_args(parse_args([]))
    assert config.state_dir == CHECKOUT / "var"
    assert Path(TokenizerSettings().vocab_dir) == config.vocab_dir
    assert Path(BillingSettings().ledger_path) == config.ledger_path


def test_a_variable_still_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("TURNPIKE_VOCAB_DIR", str(tmp_path / "v"))
    monkeypatch.setenv("TURNPIKE_BILLING_LEDGER", str(tmp_path / "l.sqlite3"))
    assert TokenizerSettings().vocab_dir == str(tmp_path / "v")
    assert BillingSettings().ledger_path == str(tmp_path / "l.sqlite3")


def test_nothing_generated_is_committed_into_a_state_folder():
    ignored = (CHECKOUT / ".gitignore").read_text().splitlines()
    assert "var/" in ignored  # at any depth, not only at the top
