"""tessel.torch.gnn against PyTorch Geometric: GCNConv and GINConv outputs and gradients with the same weights,
opcheck, finite differences, torch.compile, and a PyG model trained on Cora with Tessel's layer."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tessel.torch  # noqa: F401
from tessel.torch.gnn import GCNConv, GINConv, register_handle

pyg = pytest.importorskip("torch_geometric")
from torch_geometric.nn import GCNConv as PygGCNConv  # noqa: E402
from torch_geometric.nn import GINConv as PygGINConv  # noqa: E402


def random_graph(n, e, seed):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n - 10, (2, e), generator=g)  # the last 10 vertices are isolated
    loops = torch.arange(0, n - 10, 7)
    dup = ei[:, :15]
    return torch.cat([ei, torch.stack([loops, loops]), dup], 1)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("improved", [False, True])
@pytest.mark.parametrize("algorithm", ["adaptive", "csr"])
def test_gcnconv_matches_pyg(weighted, improved, algorithm):
    n = 400
    ei = random_graph(n, 3000, seed=1)
    w = torch.rand(ei.shape[1], generator=torch.Generator().manual_seed(2)) if weighted else None
    torch.manual_seed(3)
    ref = PygGCNConv(24, 12, improved=improved)
    torch.manual_seed(3)
    mine = GCNConv(24, 12, improved=improved, algorithm=algorithm)
    assert torch.equal(ref.lin.weight, mine.lin.weight)  # same initialization from the same random state
    mine.load_state_dict(ref.state_dict())
    with torch.no_grad():
        ref.bias.normal_()
        mine.bias.copy_(ref.bias)
    x = torch.randn(n, 24)
    for _ in range(4):  # adaptive tunes during its first applies
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = ref(xa, ei, w), mine(xb, ei, w)
        assert rel(yb, ya) < 1e-5
        dy = torch.randn_like(ya)
        ref.zero_grad()
        mine.zero_grad()
        (ya * dy).sum().backward()
        (yb * dy).sum().backward()
        assert rel(xb.grad, xa.grad) < 1e-5
        assert rel(mine.lin.weight.grad, ref.lin.weight.grad) < 1e-5
        assert rel(mine.bias.grad, ref.bias.grad) < 1e-6


def test_gcnconv_without_normalization_or_self_loops():
    n = 200
    ei = random_graph(n, 1000, seed=4)
    for kwargs in (dict(normalize=False), dict(add_self_loops=False)):
        ref = PygGCNConv(8, 4, **kwargs)
        mine = GCNConv(8, 4, **kwargs)
        mine.load_state_dict(ref.state_dict())
        x = torch.randn(n, 8)
        assert rel(mine(x, ei), ref(x, ei)) < 1e-5, kwargs


def test_ginconv_matches_pyg():
    n = 300
    ei = random_graph(n, 2000, seed=5)
    for train_eps in (False, True):
        torch.manual_seed(6)
        ref = PygGINConv(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)),
                         eps=0.3, train_eps=train_eps)
        torch.manual_seed(6)
        mine = GINConv(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)),
                       eps=0.3, train_eps=train_eps)
        for (ka, va), (kb, vb) in zip(ref.state_dict().items(), mine.state_dict().items(), strict=True):
            assert ka == kb and torch.equal(va, vb)
        xa = torch.randn(n, 16, requires_grad=True)
        xb = xa.detach().clone().requires_grad_()
        ya, yb = ref(xa, ei), mine(xb, ei)
        assert rel(yb, ya) < 1e-5
        ya.sum().backward()
        yb.sum().backward()
        assert rel(xb.grad, xa.grad) < 1e-5
        if train_eps:
            assert rel(mine.eps.grad, ref.eps.grad) < 1e-5


def handle_for_test(n=150, seed=7, symmetric=False):
    import tessel.gnn as tg

    ei = random_graph(n, 900, seed)
    if symmetric:
        ei = torch.cat([ei, ei.flip(0)], 1)
    return register_handle(tg.SpmmHandle(tg.from_edge_index(ei, n), "adaptive")), n


@pytest.mark.parametrize("symmetric", [False, True])
def test_opcheck(symmetric):
    hid, n = handle_for_test(symmetric=symmetric)
    for transpose in (False, True):
        x = torch.randn(n, 5, requires_grad=True)
        torch.library.opcheck(torch.ops.tessel.spmm.default, (x, hid, transpose))


def test_gradient_by_finite_differences():
    # Tessel aggregates in float32 only, so gradcheck's double precision does not apply: central differences of
    # a scalar loss in float32 against the autograd gradient, at a step the rounding allows.
    hid, n = handle_for_test()
    x = torch.randn(n, 3, dtype=torch.float32, requires_grad=True)
    c = torch.randn(n, 3)

    def loss(t):
        return (torch.ops.tessel.spmm(t, hid, False) * c).sum().double()

    loss(x).backward()
    eps = 1e-2
    g = torch.Generator().manual_seed(0)
    for _ in range(25):
        i, j = torch.randint(0, n, (1,), generator=g).item(), torch.randint(0, 3, (1,), generator=g).item()
        xp, xm = x.detach().clone(), x.detach().clone()
        xp[i, j] += eps
        xm[i, j] -= eps
        fd = (loss(xp) - loss(xm)).item() / (2 * eps)
        assert abs(fd - x.grad[i, j].item()) <= 2e-3 * max(1.0, abs(fd)), (i, j, fd, x.grad[i, j].item())


def test_torch_compile():
    n = 200
    ei = random_graph(n, 1500, seed=8)
    model = GCNConv(16, 4)
    x = torch.randn(n, 16)
    compiled = torch.compile(model, backend="aot_eager")
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = model(xa, ei), compiled(xb, ei)
    assert torch.allclose(ya, yb)
    ya.sum().backward()
    yb.sum().backward()
    assert torch.allclose(xa.grad, xb.grad)


class Net(torch.nn.Module):
    """PyG's GCN example (examples/gcn.py): the layer class is the only difference."""

    def __init__(self, conv, fin, hidden, classes):
        super().__init__()
        self.conv1 = conv(fin, hidden)
        self.conv2 = conv(hidden, classes)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, edge_index).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def cora_as_pyg(path):
    import tessel.gnn as tg

    d = tg.load_dataset(path)
    indptr, indices, _ = d.graph.csr()
    rows = np.repeat(np.arange(d.num_nodes), np.diff(indptr))
    ei = torch.from_numpy(np.stack([indices.astype(np.int64), rows]))
    x = torch.from_numpy(d.features)
    x = x / x.sum(1, keepdim=True).clamp_min(1)  # row-normalized, as PyG's NormalizeFeatures
    y = torch.from_numpy(d.labels.astype(np.int64))
    return x, ei, y, [torch.from_numpy(d.mask(m)).bool() for m in ("train", "val", "test")]


def train_cora(conv, data, seed, epochs=200):
    x, ei, y, (train, val, test) = data
    torch.manual_seed(seed)
    model = Net(conv, x.shape[1], 16, int(y.max()) + 1)
    opt = torch.optim.Adam([dict(params=model.conv1.parameters(), weight_decay=5e-4),
                            dict(params=model.conv2.parameters(), weight_decay=0)], lr=0.01)
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(x, ei)[train], y[train]).backward()
        opt.step()
    model.eval()
    pred = model(x, ei).argmax(1)
    return (pred[test] == y[test]).float().mean().item()


def test_gcnconv_vs_pyg_on_cora(cora_h5):
    data = cora_as_pyg(cora_h5)
    x, ei, _, _ = data
    torch.manual_seed(0)
    ref = PygGCNConv(x.shape[1], 16)
    mine = GCNConv(x.shape[1], 16)
    mine.load_state_dict(ref.state_dict())
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ref(xa, ei), mine(xb, ei)
    assert rel(yb, ya) < 1e-5
    ya.square().sum().backward()
    yb.square().sum().backward()
    assert rel(xb.grad, xa.grad) < 1e-5 and rel(mine.lin.weight.grad, ref.lin.weight.grad) < 1e-5
    acc_pyg = [train_cora(PygGCNConv, data, s) for s in (1, 2, 3)]
    acc_tessel = [train_cora(GCNConv, data, s) for s in (1, 2, 3)]
    assert abs(np.mean(acc_tessel) - np.mean(acc_pyg)) <= 0.01, (acc_tessel, acc_pyg)
    assert np.mean(acc_tessel) > 0.78
