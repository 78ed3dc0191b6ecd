"""A healing trainer never unpickles code from its peer: the reference trainer's HTTP transport loads with
weights_only=True. Real torchft transports, a real HTTP server, torch's own streaming serialiser."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed._serialization import _streaming_save
from torchft.checkpointing.http_transport import HTTPTransport

from lamplighter.configs.schema import ModelConfig
from lamplighter.trainer.heal_transport import HealRefused, load_weights_only, weights_only_http_transport
from lamplighter.trainer.model import build_model, lm_loss
from lamplighter.trainer.train_state import TrainState

TIMEOUT = timedelta(seconds=10)


class MakesADirectory:
    """What a hostile "recovery source" serves: unpickling it calls os.mkdir (any function would do)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.path),))


@pytest.fixture
def hostile_peer(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTP server that answers every GET with a state carrying a __reduce__, in torchft's wire format."""
    marker = tmp_path / "code-ran"
    payload = tmp_path / "payload"
    with payload.open("wb") as f:
        _streaming_save({"user": {"default": {"model": MakesADirectory(marker)}}}, f)
    body = payload.read_bytes()

    class Serve(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/checkpoint/7/full", marker
    finally:
        server.shutdown()
        server.server_close()


def test_torchfts_own_http_transport_runs_what_the_peer_serves(hostile_peer: tuple[str, Path]) -> None:
    """The attack, shown on torchft's transport (what the reference trainer used before): the heal runs it."""
    url, marker = hostile_peer
    HTTPTransport._load_from_address(url, TIMEOUT)
    assert marker.is_dir()


def test_the_reference_trainers_transport_refuses_it_and_runs_nothing(hostile_peer: tuple[str, Path]) -> None:
    url, marker = hostile_peer
    with pytest.raises(HealRefused, match=r"heal from http://127\.0\.0\.1:\d+/checkpoint/7/full: refused"):
        load_weights_only(url, TIMEOUT)
    transport = weights_only_http_transport(TIMEOUT)  # what build_manager gives the Manager
    try:
        with pytest.raises(HealRefused):
            transport.recv_checkpoint(0, url.removesuffix("7/full"), 7, TIMEOUT)
    finally:
        transport.shutdown()
    assert not marker.exists()


def trained_state(seed: int, cursor: int) -> TrainState:
    """A reference trainer's state after one AdamW step."""
    torch.manual_seed(seed)
    cfg = ModelConfig(dim=32, layers=1, heads=2, seq_len=8, batch_size=2)
    model = build_model(cfg)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lm_loss(model, torch.randint(0, cfg.vocab_size, (2, 9))).backward()
    optim.step()
    return TrainState(model=model, optim=optim, replica_id=seed, cursor=cursor)


def heal(sent: dict[str, object], receive_into: Callable[[], object] | None = None) -> Any:
    """`sent` served by one reference-trainer transport and received by another, as torchft's Manager does."""
    sender = weights_only_http_transport(TIMEOUT)
    receiver = weights_only_http_transport(TIMEOUT, receive_into=receive_into)
    try:
        sender.send_checkpoint([1], 3, sent, TIMEOUT)
        return receiver.recv_checkpoint(0, sender.metadata(), 3, TIMEOUT)
    finally:
        sender.shutdown()
        receiver.shutdown()


def test_a_real_trainers_state_heals_through_it_bit_identical() -> None:
    """Model, AdamW state after a step (tensors, floats, tuples, bools, None), the data cursor and torchft's
    own counters: all of it loads with weights_only=True, through the transport's own server."""
    state = trained_state(1, 42)
    model, optim = state.model, state.optim
    got = heal({"user": {"default": state.state_dict()}, "torchft": {"step": 3, "batches_committed": 6}})
    assert got["torchft"] == {"step": 3, "batches_committed": 6}
    received = got["user"]["default"]
    assert received["data"] == {"cursor": 42} and received["sender"] == {"replica_id": 1}
    assert received["optim"]["param_groups"] == optim.state_dict()["param_groups"]
    for name, t in model.state_dict().items():
        assert torch.equal(received["model"][name], t), name


def test_a_heal_lands_in_the_trainers_own_tensors_and_loads_without_a_copy() -> None:
    """The healing trainer's weights and AdamW moments receive the peer's bytes where they are: the tensors it
    gets back share its memory, and its load_state_dict leaves it equal to the peer."""
    peer, healing = trained_state(1, 42), trained_state(2, 0)
    sent = {"user": {"default": peer.state_dict()}, "torchft": {"step": 3}}
    own = {name: t.data_ptr() for name, t in healing.model.state_dict().items()}
    moments = [s["exp_avg"].data_ptr() for s in healing.optim.state.values()]
    received = heal(sent, healing.receive_into)["user"]["default"]
    assert {n: t.data_ptr() for n, t in received["model"].items()} == own
    assert [s["exp_avg"].data_ptr() for s in received["optim"]["state"].values()] == moments
    healing.load_state_dict(received)
    assert healing.hash() == peer.hash() and healing.cursor == 42
    assert [s["exp_avg"].data_ptr() for s in healing.optim.state.values()] == moments


def test_what_does_not_match_the_trainers_tensors_gets_memory_of_its_own() -> None:
    import io

    from lamplighter.trainer.heal_stream import load_into

    base = torch.arange(10.0)
    sent = {"w": torch.randn(4, 3), "b": torch.randn(3), "views": [base[:5], base[5:]], "n": 7}
    mine = {"w": torch.zeros(4, 3), "b": torch.zeros(4), "views": [torch.zeros(5), torch.zeros(5)]}
    stream = io.BytesIO()
    _streaming_save(sent, stream)
    stream.seek(0)
    got = load_into(stream, mine, "test")
    assert got["w"].data_ptr() == mine["w"].data_ptr() and torch.equal(mine["w"], sent["w"])
    assert got["b"].data_ptr() != mine["b"].data_ptr() and torch.equal(got["b"], sent["b"])  # another shape
    # Two views of one storage stay one storage, and the trainer's separate tensors are left alone.
    assert got["views"][0].untyped_storage().data_ptr() == got["views"][1].untyped_storage().data_ptr()
    assert torch.equal(torch.cat(got["views"]), base) and not mine["views"][0].any() and got["n"] == 7


@pytest.mark.parametrize("cut", ["header", "storage"])
def test_a_stream_cut_short_or_reshaped_is_refused_with_what_was_wrong(cut: str) -> None:
    import io

    from lamplighter.trainer.heal_stream import HealStreamError, load_into

    stream = io.BytesIO()
    _streaming_save({"w": torch.randn(1000)}, stream)
    body = stream.getvalue()
    short = body[:20] if cut == "header" else body[:-100]
    with pytest.raises(HealStreamError, match="test"):
        load_into(io.BytesIO(short), {"w": torch.zeros(1000)}, "test")
