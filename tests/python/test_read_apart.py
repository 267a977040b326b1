"""A scalar read (.item(), bool()) that depends on a small part of the pending
graph runs that part alone and leaves the graph recording (tracer/read_apart.cpp):
transformers' mask checks no longer cut a forward into several programs."""
import pytest
import torch
from torch.testing import assert_close

from conftest import DEV, lazyjit

APART = "read apart (.item() without a cut)"


def _apart_count():
    return lazyjit.metrics()["timings"].get(APART, {}).get("count", 0)


def test_mask_check_mid_forward_does_not_cut(fresh):
    torch.manual_seed(0)
    w = torch.randn(16, 16)
    x = torch.randn(4, 16)
    mask = torch.ones(4, 16, dtype=torch.long)
    mask[2, :5] = 0
    xl, wl, ml = x.to(DEV), w.to(DEV), mask.to(DEV)
    h = (xl @ wl).tanh()                      # pending work before the check
    all_ones = bool((ml[:, -1] == 1).all())   # a small part: reads only the mask
    padded = ml.sum().item()
    y = torch.where(ml.bool(), h, h * 0.5) if not all_ones else h
    got = (y * 2).cpu()
    assert all_ones is True and padded == 59
    assert lazyjit.metrics()["syncs"] == 1, lazyjit.metrics()["sync_reasons"]
    assert _apart_count() == 2
    h_ref = (x @ w).tanh()
    assert_close(got, h_ref * 2)


def test_value_of_computed_part_equals_eager_and_graph_still_computes_it(fresh):
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    xl = x.to(DEV)
    big = (xl.exp() @ xl.t()).sum()          # other pending work
    m = (xl * 3 - 1)[1:, ::2]                 # a strided view of a computed value
    mx = m.max()
    assert mx.item() == (x * 3 - 1)[1:, ::2].max().item()
    assert _apart_count() == 1
    # The part computed m's storage too: the read gave it its value, and
    # reading it, or mx again, runs nothing.
    ran = lazyjit.metrics()["graphs_executed"]
    assert m[1, 1].item() == (x * 3 - 1)[1:, ::2][1, 1].item()
    assert _apart_count() == 1
    assert mx.item() == (x * 3 - 1)[1:, ::2].max().item()
    assert_close(m.cpu(), (x * 3 - 1)[1:, ::2])
    assert lazyjit.metrics()["graphs_executed"] == ran and lazyjit.metrics()["syncs"] == 0
    # In-place writes after the read record on its data.
    m.add_(1)
    assert_close(big.cpu(), (x.exp() @ x.t()).sum())
    assert_close(m.cpu(), (x * 3 - 1)[1:, ::2] + 1)
    assert lazyjit.metrics()["syncs"] == 1


def test_storages_the_part_computes_get_their_values_with_the_read(fresh):
    # generate's stop check: the ids the next token is appended to, the token
    # and the unfinished mask are all computed by the part bool() reads. They
    # take their values from its program; the pending graph (the position
    # update) does not compute them again, and reading them runs nothing.
    torch.manual_seed(0)
    logits, ids, pos = torch.randn(1, 50), torch.randint(3, 50, (1, 6)), torch.arange(6)
    unfinished = torch.ones(1, dtype=torch.long)
    ll, il, pl, ul = logits.to(DEV), ids.to(DEV), pos.to(DEV), unfinished.to(DEV)
    lazyjit.sync()
    lazyjit.reset_metrics()

    def step(logits, ids, pos, unfinished):
        pos = pos[-1:] + 1                                   # pending work the read does not need
        token = logits.argmax(-1) * unfinished
        ids = torch.cat([ids, token[:, None]], dim=-1)
        unfinished = unfinished & ~(ids[:, -1] == 7)
        return pos, token, ids, unfinished, bool(unfinished.max() == 0)

    pos_e, token_e, ids_e, unf_e, done_e = step(logits, ids, pos, unfinished)
    pos_l, token_l, ids_l, unf_l, done_l = step(ll, il, pl, ul)
    assert done_l == done_e and _apart_count() == 1 and lazyjit.metrics()["syncs"] == 0
    ran = lazyjit.metrics()["graphs_executed"]
    assert torch.equal(ids_l.cpu(), ids_e) and torch.equal(token_l.cpu(), token_e)
    assert torch.equal(unf_l.cpu(), unf_e)
    assert lazyjit.metrics()["graphs_executed"] == ran and lazyjit.metrics()["syncs"] == 0
    assert torch.equal(pos_l.cpu(), pos_e) and lazyjit.metrics()["syncs"] == 1
    # Later ops on them read their values as inputs, in place too.
    ids_l.add_(1)
    assert torch.equal(torch.cat([ids_l, token_l[:, None]], -1).cpu(), torch.cat([ids_e + 1, token_e[:, None]], -1))


def test_large_part_still_syncs(fresh):
    x = torch.randn(512, 512)
    xl = x.to(DEV)
    other = xl + 1
    s = (xl * 2).sum()                        # 2 x 262144 elements: over the limit
    assert s.item() == pytest.approx((x * 2).sum().item(), rel=1e-5)
    assert _apart_count() == 0
    assert "item() @" in " ".join(lazyjit.metrics()["sync_reasons"])
    assert_close(other.cpu(), x + 1)


def test_whole_graph_is_synced_once_not_twice(fresh):
    xl = torch.ones(4).to(DEV)
    assert (xl * 2).sum().item() == 8.0
    assert _apart_count() == 0 and lazyjit.metrics()["syncs"] == 1


def test_failing_part_raises_eagers_error_at_the_read(fresh):
    x = torch.randn(8, 8).to(DEV)
    other = x @ x
    idx = torch.tensor([1, 9]).to(DEV)
    with pytest.raises(IndexError):
        torch.index_select(torch.ones(4).to(DEV), 0, idx).sum().item()
    assert_close(other.cpu(), x.cpu() @ x.cpu())


def test_transformers_forward_with_padding_mask_is_one_program(fresh):
    try:
        import transformers
    except ImportError:  # scripts/setup.sh installs it: missing is a broken set-up, not a skip
        pytest.fail("transformers is not installed: run scripts/setup.sh", pytrace=False)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    m = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 100, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :3] = 0
    with torch.no_grad():
        ref = m(ids, attention_mask=mask).logits
        m.to(DEV)
        lazyjit.reset_metrics()
        got = m(ids.to(DEV), attention_mask=mask.to(DEV)).logits.cpu()
    assert_close(got, ref, atol=1e-5, rtol=1e-4)
    assert lazyjit.metrics()["syncs"] == 1, lazyjit.metrics()["sync_reasons"]
    assert _apart_count() >= 1


def test_strict_region_still_refuses_the_read(fresh):
    x = torch.randn(8, 8).to(DEV)
    mask = torch.ones(8, dtype=torch.long).to(DEV)
    lazyjit.sync()
    other = x @ x
    with lazyjit.strict():
        with pytest.raises(RuntimeError, match="implicit sync in a strict region"):
            bool(mask.eq(1).all())
    assert _apart_count() == 0
    assert_close(other.cpu(), x.cpu() @ x.cpu())


def test_a_loss_read_after_its_backward_syncs_the_step(fresh):
    # A small model's loss.item() after backward() and the update: the update
    # reads the forward's values, so the read ends the step (one program per
    # step, as before), instead of leaving the backward pending.
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    ml = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    ml.load_state_dict(m.state_dict())
    ml.to(DEV)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    optl = torch.optim.SGD(ml.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    xl, yl = x.to(DEV), y.to(DEV)
    for step in range(4):
        for model, o, a, b in ((m, opt, x, y), (ml, optl, xl, yl)):
            o.zero_grad()
            loss = torch.nn.functional.mse_loss(model(a), b)
            loss.backward()
            o.step()
            if model is m:
                want = loss.item()
            else:
                got = loss.item()
        assert got == pytest.approx(want, rel=1e-5)
        if step == 1:
            lazyjit.reset_metrics()
    assert _apart_count() == 0
    assert lazyjit.metrics()["syncs"] == 2 and lazyjit.metrics()["compiles"] == 0, lazyjit.metrics()["sync_reasons"]
    for p, q in zip(m.parameters(), ml.parameters()):
        assert_close(q.cpu(), p.detach(), rtol=1e-5, atol=1e-6)
