"""ResidualStore (gradcomp/torch/_layout.py): error-feedback states kept per flat-buffer layout and
converted to and from {parameter name: tensor} for checkpoints. A loaded state is placed into the
layouts that hold its parameter; named() adds what is still pending to what the layouts hold, so every
element must be in exactly one of the two."""

import pytest
import torch

import gradcomp
from gradcomp.torch._layout import Layout, Piece, ResidualStore


def chunked(name: str, full: int, chunks: list[tuple[int, int]], numel: int, offset: int = 0) -> Layout:
    """A layout of pieces (first element in the parameter, count) of one parameter, back to back."""
    pieces, at = [], offset
    for first, n in chunks:
        pieces.append(Piece(name, first, at, n, full))
        at += n
    return Layout(pieces, numel)


def test_a_loaded_state_is_placed_once_and_saved_as_the_layout_holds_it():
    w = torch.arange(1.0, 9.0)
    for layout in (chunked("w", 8, [(0, 8)], 8),                    # a DDP bucket: the parameter whole
                   chunked("w", 8, [(0, 4), (4, 4)], 8),            # FSDP's input: one piece per destination
                   chunked("w", 8, [(4, 4), (0, 4)], 10, offset=2)):  # pieces out of order, after padding
        store = ResidualStore()
        store.load_named({"w": w})
        buf = store.current(layout, torch.device("cpu"))
        for p in layout.pieces:
            assert torch.equal(buf[p.offset:p.offset + p.numel], w[p.name_offset:p.name_offset + p.numel])
        assert torch.equal(store.named()["w"], w)  # not loaded + placed (FSDP's chunks were, before)
        new = store.scratch(layout)
        new.copy_(buf * 10)
        store.commit(layout)
        assert torch.equal(store.named()["w"], w * 10)
        assert not store._pending  # nothing of w is left waiting


def test_a_shard_keeps_its_own_piece_and_drops_the_other_ranks_zeros():
    # FSDP's ef21 H: each rank saves its shard and zeros elsewhere, and holds only its shard.
    saved = torch.tensor([0.0, 0.0, 0.0, 0.0, 5.0, 6.0, 7.0, 8.0])
    store = ResidualStore()
    store.load_named({"w": saved})
    shard = chunked("w", 8, [(4, 4)], 4)
    buf = store.current(shard, torch.device("cpu"))
    assert torch.equal(buf, saved[4:])
    assert not store._pending  # the zeros left are not kept (n per rank, for nothing)
    assert torch.equal(store.named()["w"], saved)


def test_pieces_of_one_parameter_in_two_layouts_lose_nothing():
    w = torch.arange(1.0, 5.0)
    store = ResidualStore()
    store.load_named({"w": w})
    first, second = chunked("w", 4, [(0, 2)], 2), chunked("w", 4, [(2, 2)], 2)
    store.current(first, torch.device("cpu"))
    # placing the second dissolves the first into pending (they share a parameter) and adds, not replaces
    store.current(second, torch.device("cpu"))
    assert torch.equal(store.named()["w"], w)
    assert torch.equal(store.current(first, torch.device("cpu")), w[:2])
    assert torch.equal(store.named()["w"], w)


def test_a_state_of_another_size_is_refused_naming_the_parameter():
    store = ResidualStore()
    store.load_named({"w": torch.ones(9)})
    with pytest.raises(gradcomp.InvalidArgument, match="parameter 'w' holds 9 values, the parameter 8"):
        store.current(chunked("w", 8, [(0, 8)], 8), torch.device("cpu"))
