"""What the tests share, so that no test file imports another: ``assert_close`` (prints the
error it saw), the toy target + drafter pair, a drafter that knows part of the answer (so
losslessness tests really accept draft tokens), the seeded random-tree / random-prefix
factories, the cache comparison, the distribution checks of the sampling tests (with their
deliberately wrong rules) and a hand-built results frame."""
import contextlib
import math
import zlib

import torch

from ddtree_lab.core import harness
from ddtree_lab.core.drafter import DFlashDrafter, DrafterConfig, Draft
from ddtree_lab.core.models import build_target
from ddtree_lab.core.tree import DraftTree
from ddtree_lab.experiments.plumbing import measure


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, tol: float) -> float:
    """Scale-aware closeness: max |ref - out| <= tol * max(1, max |ref|), printed either way.

    ``tol`` is a relative tolerance for tensors larger than 1 and an absolute one below (so a
    BLAS that rounds differently on another CPU stays inside it). A tolerance of 0 is refused:
    where bit-identity is the claim, use ``assert_identical``. Returns the scaled error.
    """
    if tol <= 0:
        raise ValueError(f"{name}: tol must be > 0 (got {tol}); use assert_identical for bit-identity")
    if not ref.numel():
        return 0.0
    diff = (ref.double() - out.double()).abs()
    scale = max(1.0, ref.double().abs().max().item())
    err = diff.max().item() / scale
    rms = diff.square().mean().sqrt().item() / max(ref.double().square().mean().sqrt().item(), 1e-30)
    print(f"{name}: max err {err:.3e} (scale {scale:.2g}, tol {tol:.0e}), relative rms {rms:.2e}")
    assert err <= tol, f"{name}: max err {err:.3e} > tol {tol:.0e} (scale {scale:.2g})"
    return err


def assert_identical(name: str, ref: torch.Tensor, out: torch.Tensor) -> None:
    """Bit-identity (same shape, dtype and bits): only where that is the claim (copies, gathers,
    a result recomputed by the very same kernels). Tests that call it run under 1 and 2 torch
    threads (the ``threads`` fixture)."""
    assert ref.shape == out.shape and ref.dtype == out.dtype, \
        f"{name}: {tuple(ref.shape)}/{ref.dtype} vs {tuple(out.shape)}/{out.dtype}"
    err = (ref.double() - out.double()).abs().max().item() if ref.numel() else 0.0
    print(f"{name}: bit-identical {torch.equal(ref, out)} (max abs err {err:.3e})")
    assert torch.equal(ref, out), f"{name}: not bit-identical, max abs err {err:.3e}"


COMPILE_GROUP = "compile"   # tests that torch.compile share one xdist worker: inductor's disk cache of kernels


def toy_pair(preset: str = "gdn-toy", seed: int = 0, block_size: int = 8):
    """(target, drafter): a random toy target and a 1-layer random drafter (MASK = last id)."""
    target = build_target(preset, seed=seed)
    cfg = DrafterConfig.for_target(target, mask_token_id=target.config.vocab_size - 1, num_layers=1,
                                   block_size=block_size)
    torch.manual_seed(seed + 1)
    return target, DFlashDrafter.from_config(cfg, target).eval()


def toy_dflash2(preset: str = "gdn-toy", seed: int = 0, scale: float = 3.0):
    """(target, DFlash 2 drafter): ``toy_pair``'s drafter as a ``DFlash2DraftModel``
    (``dflash2_from``: top-4 candidates, rank 8), its selector's codebooks randomised (x
    ``scale``) so children depend on the parent."""
    from ddtree_lab.train.drafters import dflash2_from
    target, drafter = toy_pair(preset, seed=seed)
    d2 = dflash2_from(drafter, target, selector_rank=8, selector_top_k=4)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for emb in (d2.selector.predecessor_codebook, d2.selector.successor_codebook):
            emb.weight.copy_(torch.randn(emb.weight.shape, generator=gen) * scale)
    return target, d2.eval()


class HintedDrafter:
    """A real drafter whose proposals are nudged toward a known continuation ``sequence``
    (prompt + the target's AR output) at depths d with (position + d) % 3 != 0, so rounds
    accept several draft tokens and still reject some: both paths of the accept walk run.
    The hint is the target's own output, so a verify bug still shows as output != AR."""

    def __init__(self, drafter: DFlashDrafter, sequence: list[int], boost: float = 30.0):
        self.drafter, self.sequence, self.boost = drafter, list(sequence), boost
        self.cfg = drafter.cfg

    def new_state(self):
        return self.drafter.new_state()

    @property
    def model(self):
        return self.drafter.model

    def draft(self, state, new_features, last_token: int, block_size: int, forward=None) -> Draft:
        logits = self.drafter.draft(state, new_features, last_token, block_size, forward).logits.clone()  # [bs-1, V]
        root = state.length  # position of ``last_token``: every earlier row is in the context
        for d in range(1, block_size):
            if root + d < len(self.sequence) and (root + d) % 3:
                logits[d - 1, self.sequence[root + d]] += self.boost
        return Draft(logits)

    selector = None

    def draft_batch(self, states, new_features, last_tokens, block_size, forward=None) -> list:
        return [self.draft(*args, block_size, forward) for args in zip(states, new_features, last_tokens)]


class BatchHintedDrafter:
    """``HintedDrafter`` per sequence: the k-th ``new_state`` belongs to the k-th prompt."""

    def __init__(self, drafter, sequences):
        self.hinted = [HintedDrafter(drafter, s) for s in sequences]
        self.cfg, self.owner = drafter.cfg, {}

    def new_state(self):
        state = self.hinted[len(self.owner)].new_state()
        self.owner[id(state)] = self.hinted[len(self.owner)]
        return state

    def draft(self, state, new_features, last_token, block_size, forward=None) -> Draft:
        return self.owner[id(state)].draft(state, new_features, last_token, block_size, forward)

    selector = None

    def draft_batch(self, states, new_features, last_tokens, block_size, forward=None) -> list:
        """Each state's own hinted proposal."""
        return [self.draft(*args, block_size, forward) for args in zip(states, new_features, last_tokens)]


# ----------------------------------------------------------------------------- seeded factories

LOGIT_TOL = {torch.float32: 2e-6, torch.float64: 1e-12}  # tree logits vs the full forward, per dtype


def generator(*key) -> torch.Generator:
    """A generator seeded by a stable hash of ``key`` (a case id: the same case, the same draws)."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


TREE_KINDS = measure.TREE_KINDS


def random_tree(kind: str, budget: int, vocab: int, gen: torch.Generator) -> DraftTree:
    """``measure.tree_of_kind``: the lab's one random-tree factory (``TREE_KINDS``)."""
    return measure.tree_of_kind(kind, budget, vocab, gen)


def random_prefix(vocab: int, gen: torch.Generator, low: int = 1, high: int = 20) -> list[int]:
    """Token ids of a length drawn uniformly in [low, high] (low == high: that length)."""
    length = int(torch.randint(low, high + 1, (1,), generator=gen))
    return torch.randint(vocab, (length,), generator=gen).tolist()


def root_path(tree: DraftTree, pick: str, gen: torch.Generator) -> list[int]:
    """[0] ("root"), the path to the deepest node ("deepest") or to a random node ("random")."""
    if pick == "root":
        return [0]
    node = int(tree.depths.argmax()) if pick == "deepest" else int(torch.randint(len(tree), (1,), generator=gen))
    return tree.path_to(node)


def precision(dtype: torch.dtype):
    """float64 runs under the harness (dtype-preserving stock modules); float32 runs stock."""
    return harness.float64_harness() if dtype == torch.float64 else contextlib.nullcontext()


def assert_same_cache(name: str, ref, out, tol: float) -> None:
    """Committed attention rows and GDN conv / recurrent states of two caches agree."""
    assert ref.length == out.length
    assert ref.kv.keys() == out.kv.keys() and ref.conv.keys() == out.conv.keys()
    for i in ref.kv:
        for part, a, b in zip("kv", ref.kv[i], out.kv[i]):
            assert a.shape[-2] >= ref.length and b.shape[-2] >= ref.length
            assert_close(f"{name} layer{i} {part}", a[..., :ref.length, :], b[..., :ref.length, :], tol)
    for i in ref.conv:
        assert_close(f"{name} layer{i} conv", ref.conv[i], out.conv[i], tol)
        assert_close(f"{name} layer{i} rec", ref.rec[i], out.rec[i], tol)


# ----------------------------------------------------------------------------- distribution checks

def chi_square_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson chi-square goodness of fit, categories with expected < 5 pooled;
    p-value by the Wilson-Hilferty normal approximation."""
    n = counts.sum()
    exp = probs * n
    order = exp.argsort()
    small = exp[order].cumsum(0) < 5
    pooled_c = torch.cat([counts[order][small].sum(0, keepdim=True), counts[order][~small]])
    pooled_e = torch.cat([exp[order][small].sum(0, keepdim=True), exp[order][~small]])
    keep = pooled_e > 0
    stat = float(((pooled_c[keep] - pooled_e[keep]) ** 2 / pooled_e[keep]).sum())
    df = int(keep.sum()) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def exact_first_two(target, prompt, temperature):
    """Exact P(1st token) [V] and marginal P(2nd token) [V] under target sampling."""
    from ddtree_lab.core.verify import full_forward_logits
    V = target.config.vocab_size
    p1 = torch.softmax(full_forward_logits(target, prompt).double() / temperature, -1)  # [V]
    ext = torch.cat([prompt.expand(V, -1), torch.arange(V)[:, None]], 1)  # [V, T+1]
    with torch.no_grad():
        p2_given = torch.softmax(target(ext).logits[:, -1].double() / temperature, -1)  # [V, V]
    return p1, p1 @ p2_given


def biased_accept(tree, target_choice):
    """Deliberately wrong accept walk: on a mismatch, accept the first child anyway."""
    path, choice = [0], target_choice.tolist()
    while tree.children[path[-1]]:
        match = tree.child_by_token[path[-1]].get(choice[path[-1]])
        path.append(match if match is not None else tree.children[path[-1]][0])
    return path, int(choice[path[-1]])


def no_residual(x, fallback):
    """Deliberately wrong rejection rule: after a rejected draft token the target
    distribution is not replaced by the residual max(0, p - q) (and q keeps the token)."""
    return fallback


def sharp_drafter(drafter, scale=4.0):
    """The toy drafter with sharpened logits: its q differs from p a lot, so a wrong rule
    shows (a flat random q is nearly uniform and rarely accepted)."""
    class Sharp:
        cfg = drafter.cfg
        new_state = drafter.new_state
        selector = None

        def draft(self, state, feats, root, bs, forward=None):
            return self.draft_batch([state], [feats], [root], bs, forward)[0]

        def draft_batch(self, states, feats, roots, bs, forward=None):
            return [Draft(d.logits * scale) for d in drafter.draft_batch(states, feats, roots, bs, forward)]
    return Sharp()


# ----------------------------------------------------------------------------- results

def results_frame():
    """A hand-built results frame: 2 archs, AR / DFlash / DDTree, 3 prompts, 8 new tokens.

    Every prompt gets 8 tokens; a config's seconds per prompt are fixed below, so its
    tokens/s is 8 / seconds, except mla AR (1, 2, 1 s: 24 tokens / 4 s = 6 tok/s, where a
    mean of per-prompt rates would give 6.67). gdn AR: 8 tok/s. Peaks of tokens/s: gdn wy at
    budget 7, gdn naive at 3, mla at 15. gdn naive budget 15 diverges from AR on prompt 1 at
    position 5. One gdn wy 'auto' row (mean tree size 7) and one T = 1 row with no AR twin.
    """
    import pandas as pd

    def row(arch, method, mode, budget, block, prompt, seconds, temperature=0.0, diverge=None, sizes=None):
        tokens = [100 * prompt + i for i in range(8)]
        if diverge is not None:
            tokens[diverge] = 99
        tau = 1.0 if method == "ar" else 1.0 + math.log2(int(block if budget == "auto" else budget) + 1) / 2 + 0.1 * prompt
        metrics = {"tokens": tokens, "acceptance_lengths": [2] * 4, "tree_sizes": sizes if sizes is not None else [],
                   "timings": {"draft": 0.0, "tree": 0.0, "verify": seconds, "accept": 0.0, "commit": 0.0,
                               "prefill": 0.0, "total": seconds},
                   "tau": tau, "tokens_per_s": 8 / seconds, "rounds": 4, "prompt_len": 10}
        return {"arch": arch, "method": method, "gdn_mode": mode, "budget": budget, "block_size": block,
                "temperature": temperature, "max_new_tokens": 8, "prompt": prompt, "tau": tau,
                "tokens_per_s": 8 / seconds, "rounds": 4, "prompt_len": 10, "_metrics": metrics}

    ddtree_seconds = {("gdn", "wy"): {1: 0.5, 3: 0.4, 7: 0.25, 15: 0.32},
                      ("gdn", "naive"): {1: 0.8, 3: 0.5, 7: 0.64, 15: 1.0},
                      ("mla", "wy"): {1: 0.5, 3: 0.4, 7: 0.32, 15: 0.25}}
    dflash_seconds = {("gdn", "wy"): 0.5, ("gdn", "naive"): 0.8, ("mla", "wy"): 0.4}
    auto_sizes = {0: [5, 9], 1: [7], 2: [7, 7]}
    rows = []
    for p in range(3):
        rows.append(row("gdn", "ar", "wy", 0, 0, p, 1.0))
        rows.append(row("mla", "ar", "wy", 0, 0, p, [1.0, 2.0, 1.0][p]))
        for (arch, mode), secs in dflash_seconds.items():
            rows.append(row(arch, "dflash", mode, 3, 4, p, secs, sizes=[3] * 4))
        for (arch, mode), by_budget in ddtree_seconds.items():
            for budget, secs in by_budget.items():
                diverge = 5 if (mode, budget, p) == ("naive", 15, 1) else None
                rows.append(row(arch, "ddtree", mode, budget, 4, p, secs, diverge=diverge, sizes=[budget] * 4))
        rows.append(row("gdn", "ddtree", "wy", "auto", 4, p, 0.2, sizes=auto_sizes[p]))
        rows.append(row("gdn", "ddtree", "wy", 7, 4, p, 0.5, temperature=1.0, sizes=[7] * 4))
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- reference twins

@torch.no_grad()
def generate_reference(target, drafter, prompt_ids, *, method: str, budget: int = 32, block_size: int = 8,
                       max_new_tokens: int = 128, temperature: float = 0.0, gdn_mode: str = "wy", seed: int = 0,
                       accept_rule: str = "rejection", tree: str | None = None):
    """``decode.generate``'s plain twin: the batch-1 speculative loop, one sequence, one round
    at a time, built from the public pieces (``start``, ``drafter.draft``, the tree rule,
    ``verify``, ``accept_round``, ``commit``). -> Generation (tokens, acceptance lengths, tree
    sizes, entropies; no timings)."""
    from ddtree_lab.core import decode
    from ddtree_lab.core.cache import commit
    from ddtree_lab.core.verify import verify
    rule, layers = decode.round_rule(decode.tree_rule(drafter, tree), method), tuple(drafter.cfg.target_layer_ids)
    sampling = decode.Sampling(temperature, accept_rule, seed)
    rng = torch.Generator().manual_seed(seed) if temperature > 0 else None
    prompt = torch.as_tensor(prompt_ids, dtype=torch.long)
    cache, features, root = decode.start(target, drafter, prompt)
    state, gen = drafter.new_state(), decode.Generation()
    while len(gen.tokens) < max_new_tokens:
        draft = drafter.draft(state, features, root, block_size)
        proposal = rule.proposal(draft)
        t = decode.sampled(rule(draft, root, block_size - 1 if method == "dflash" else budget), proposal, sampling, rng)
        out = verify(target, cache, t, gdn_mode, feature_layers=layers)
        path, bonus, _ = decode.accept_round(t, out.logits, proposal, sampling, rng)
        commit(target, cache, t, path)
        features, root = out.features[path], bonus
        gen.tokens += t.tokens[path[1:]].tolist() + [bonus]
        gen.entropies += decode.entropies(out.logits[path], temperature)
        gen.acceptance_lengths.append(len(path))
        gen.tree_sizes.append(t.num_nodes)
    gen.tokens, gen.entropies = gen.tokens[:max_new_tokens], gen.entropies[:max_new_tokens]
    return gen
