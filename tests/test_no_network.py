"""Prediction, config loading and the CLI never open a socket."""
from __future__ import annotations

import json
import socket

import pytest
from click.testing import CliRunner

import wattgpu
from wattgpu import Predictor, Workload
from wattgpu.hfconfig import load_llm_file


class NetworkUsed(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise NetworkUsed(f"network access attempted: {args!r}")

    for name in ("socket", "create_connection", "getaddrinfo", "socketpair", "fromfd"):
        monkeypatch.setattr(socket, name, refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse, raising=False)
    yield


def test_guard_really_blocks(no_network):
    with pytest.raises(NetworkUsed):
        socket.create_connection(("example.com", 80))
    with pytest.raises(NetworkUsed):
        socket.socket()


def test_everything_offline(no_network, tmp_path):
    cat = wattgpu.default_catalog()
    llm = next(m.name for m in cat.llms if m.total_params_b < 10)
    # a fresh predictor so onnxruntime sessions and the catalog are created under the guard
    pred = Predictor()
    p = pred.predict("NVIDIA A100 SXM4 40GB", llm, Workload(kind="server", qps=0.5))
    assert p.power_w > 0
    rows = pred.predict_many([("H100 SXM", llm, None), ("A10", llm, Workload(kind="closed_loop", concurrency=4))])
    assert len(rows) == 2
    assert wattgpu.predict("H100 SXM", llm).itl_s > 0
    ranked = wattgpu.rank(llm, Workload(kind="server", qps=0.017), max_itl_ms=50, predictor=pred)
    assert ranked.candidates and all(c.power_w > 0 for c in ranked.candidates)

    cfg = tmp_path / "model" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
                               "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                               "vocab_size": 32000, "_name_or_path": "acme/offline-7b"}))
    spec = load_llm_file(cfg.parent)
    assert spec.name == "acme/offline-7b"
    assert pred.predict("H100 SXM", str(cfg)).llm == "acme/offline-7b"

    from wattgpu.cli import main
    r = CliRunner().invoke(main, ["predict", "--llm", str(cfg), "--gpu", "H100 SXM", "--json"], standalone_mode=True)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["power_w"] > 0
    r = CliRunner().invoke(main, ["rank", "--llm", str(cfg), "--json", "--plot", str(tmp_path / "r.svg")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "r.svg").stat().st_size > 0
    r = CliRunner().invoke(main, ["gpus"])
    assert r.exit_code == 0
