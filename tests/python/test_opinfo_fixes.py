"""Root causes behind OpInfo float32 failures (issue 16, item 3), each against eager
PyTorch on the CPU: conjugate and negative views (the fft family), dtype-reinterpreting
views (view_as_complex, view_as_real, stft), dtypes lazyjit's graphs have no name for
(hash_tensor's uint64), sparse tensors (counted fallbacks through the CPU kernels), and
new_empty_strided's strides."""
import pytest
import torch
from torch.testing import assert_close

from conftest import DEV, lazyjit


def _fallbacks(op):
    return lazyjit.metrics()["fallbacks"].get(op, 0)


def _same(got, want, exact=False):
    assert got.device.type == "lazyjit"
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.layout != torch.strided:
        assert got.layout == want.layout
        got, want = got.cpu().to_dense(), want.to_dense()
    else:
        got = got.cpu()
    assert_close(got, want, **({"rtol": 0, "atol": 0} if exact else {}))


# ---- conjugate and negative views -------------------------------------------------------
# torch.fft.ifft/ihfft of real input return conj() of an r2c transform; hfft* read
# input.conj(). A conjugate view's stored elements are not its values: copies, item(),
# the ops that take conjugates directly (mm, dot...) and views of it must apply the bit.

@pytest.mark.parametrize("fn", [
    lambda x: torch.fft.ifft(x),
    lambda x: torch.fft.ihfft(x),
    lambda x: torch.fft.hfft(torch.fft.ihfft(x)),
    lambda x: torch.fft.hfft2(x.reshape(4, 5).to(torch.complex64)),
    lambda x: torch.fft.ihfftn(x.reshape(4, 5)),
    lambda x: torch.fft.hfftn(x.reshape(4, 5).to(torch.complex64), s=(4, 6)),
], ids=["ifft", "ihfft", "hfft", "hfft2", "ihfftn", "hfftn"])
def test_fft_family_matches_eager(fn):
    x = torch.randn(20)
    _same(fn(x.to(DEV)), fn(x))


def test_conjugate_view_values():
    c = torch.randn(6, dtype=torch.complex64)
    lc = c.to(DEV)
    assert lc.conj().is_conj()
    _same(lc.conj(), c.conj(), exact=True)
    _same(lc.conj() + 1, c.conj() + 1)
    _same(lc.conj().clone(), c.conj(), exact=True)
    _same(lc.conj()[1:4], c.conj()[1:4], exact=True)  # a view of a conjugate is one
    assert lc.conj()[2].item() == c.conj()[2].item()
    _same(lc.conj().reshape(2, 3) @ lc.reshape(3, 2), c.conj().reshape(2, 3) @ c.reshape(3, 2))
    _same(torch.dot(lc.conj(), lc), torch.dot(c.conj(), c))
    _same(torch._neg_view(lc), -c, exact=True)
    _same(torch._neg_view(lc) * 2, -c * 2)
    _same(lc.conj().imag, c.conj().imag, exact=True)  # a negative view of the imaginary parts


def test_write_through_conjugate_view_reaches_base():
    c = torch.randn(5, dtype=torch.complex64)
    o = torch.randn(5, dtype=torch.complex64)
    want = c.clone()
    want.conj().add_(o)  # want becomes c + conj(o)
    got = c.to(DEV)
    got.conj().add_(o.to(DEV))
    _same(got, want)
    # Copying into a conjugate view stores the conjugate.
    want2, got2 = c.clone(), c.to(DEV)
    src = torch.randn(5, dtype=torch.complex64)
    want2.conj().copy_(src)
    got2.conj().copy_(src.to(DEV))
    _same(got2, want2, exact=True)


# ---- dtype-reinterpreting views ---------------------------------------------------------

def test_view_as_complex_and_real_match_eager():
    x = torch.randn(5, 2)
    lx = x.to(DEV)
    before = _fallbacks("aten::mul.Tensor")
    _same(torch.view_as_complex(lx), torch.view_as_complex(x), exact=True)
    _same(torch.view_as_complex(lx) * 2, torch.view_as_complex(x) * 2)
    assert _fallbacks("aten::mul.Tensor") == before + 1  # counted: through the CPU kernel
    c = torch.randn(4, dtype=torch.complex64)
    _same(torch.view_as_real(c.to(DEV)), torch.view_as_real(c), exact=True)
    _same(c.to(DEV).real + c.to(DEV).imag, c.real + c.imag)


def test_stft_real_output_matches_eager():
    x = torch.randn(100)
    want = torch.stft(x, n_fft=10, return_complex=False)
    _same(torch.stft(x.to(DEV), n_fft=10, return_complex=False), want, exact=False)


def test_write_through_view_as_real_reaches_base():
    c = torch.randn(4, dtype=torch.complex64)
    want = c.clone()
    torch.view_as_real(want)[:, 1].mul_(3)
    got = c.to(DEV) * 1  # pending in the graph when the view is written
    torch.view_as_real(got)[:, 1].mul_(3)
    _same(got, want, exact=True)


# ---- dtypes lazyjit's graphs have no name for --------------------------------------------

def test_hash_tensor_uint64_result_matches_eager():
    x = torch.randn(3, 4)
    before = _fallbacks("aten::hash_tensor")
    got = torch.hash_tensor(x.to(DEV) * 2, dim=1)
    _same(got, torch.hash_tensor(x * 2, dim=1), exact=True)
    assert got.dtype == torch.uint64
    assert _fallbacks("aten::hash_tensor") == before + 1
    # uint64 tensors move, copy and compare like any other.
    u = torch.arange(6).to(torch.uint64)
    lu = u.to(DEV)
    _same(lu, u, exact=True)
    _same(lu[2:5].clone(), u[2:5], exact=True)
    _same(lu.to(torch.int64) + 1, u.to(torch.int64) + 1, exact=True)
    _same(torch.empty(3, dtype=torch.uint32, device=DEV).fill_(7), torch.full((3,), 7, dtype=torch.uint32),
          exact=True)


# ---- sparse tensors: through the CPU kernels, counted --------------------------------------

def test_to_sparse_on_lazyjit():
    x = torch.randn(5, 5)
    x[x < 0.3] = 0
    got = x.to(DEV).to_sparse()
    assert got.layout == torch.sparse_coo and got.device.type == "lazyjit"
    _same(got, x.to_sparse(), exact=True)
    _same(x.to(DEV).to_sparse(1), x.to_sparse(1), exact=True)
    _same(got.to_dense() * 2, x * 2)
    _same(x.to_sparse().to(DEV), x.to_sparse(), exact=True)  # COO tensors move to lazyjit


def test_sparse_csr_ops_run_through_cpu_kernels():
    torch.manual_seed(0)
    a = torch.randn(4, 5)
    a[a < 0] = 0
    csr = a.to_sparse_csr()
    b = torch.randn(5, 3)
    lcsr = csr.to(DEV)
    before = _fallbacks("aten::_sparse_mm_reduce_impl")
    _same(torch.sparse.mm(lcsr, b.to(DEV), "sum"), torch.sparse.mm(csr, b, "sum"))
    assert _fallbacks("aten::_sparse_mm_reduce_impl") == before + 1
    m1, m2 = torch.randn(4, 2), torch.randn(2, 5)
    want = torch.sparse.sampled_addmm(csr, m1, m2)
    got = torch.sparse.sampled_addmm(lcsr, m1.to(DEV), m2.to(DEV))
    assert got.layout == torch.sparse_csr
    _same(got, want)


def test_writing_into_a_sparse_lazyjit_tensor_raises():
    s = torch.eye(3).to_sparse().to(DEV)
    with pytest.raises(RuntimeError, match="sparse lazyjit tensor"):
        s.mul_(2)


# ---- uninitialized memory: the strides asked for --------------------------------------------

def test_new_empty_strided_keeps_strides():
    x = torch.zeros(5).to(DEV)
    for sizes, strides in (((3, 2, 2), (1, 2, 3)), ((2, 3), (7, 8)), ((10,), (5,))):
        y = x.new_empty_strided(sizes, strides)
        want = torch.zeros(5).new_empty_strided(sizes, strides)
        assert y.device.type == "lazyjit"
        assert y.shape == want.shape and y.stride() == want.stride() and y.dtype == want.dtype
    y = x.new_empty_strided((2, 2), (1, 2), dtype=torch.float64)
    assert y.dtype == torch.float64 and y.stride() == (1, 2)
    _same(y.fill_(3), torch.full((2, 2), 3.0, dtype=torch.float64).t().contiguous().t(), exact=True)
