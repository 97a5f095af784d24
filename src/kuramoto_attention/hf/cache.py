"""transformers' cache seen by our blocks: the per-layer protocol ``ops.attention.KVCache`` defines.

Each block's attention takes ``cache``, an object with ``length`` (the tokens already cached, i.e. the position of
this call's first token) and ``update(k, v) -> (all_k, all_v)`` (B, H, S, d). ``LayerCache`` gives one layer of a
transformers ``Cache`` (``DynamicCache`` by default) that shape, so that ``generate`` and every cache strategy of
transformers (beam reordering, cropping, offloading) drive our incremental decoding. It stores whatever the block
hands to ``update``, as the block hands it: what a layer caches, and when, stays the layer's business.
"""

from __future__ import annotations

from torch import Tensor
from transformers import Cache


class LayerCache:
    """Layer ``layer_idx`` of ``cache``, after ``length`` tokens (at the start of a forward call the same for every
    layer: the tokens seen before it, read once before any layer adds to the cache). As ``KVCache``'s, ``length``
    counts the keys appended, so that it is right after an ``update`` too."""

    def __init__(self, cache: Cache, layer_idx: int, length: int) -> None:
        self.cache, self.layer_idx, self.length = cache, layer_idx, length

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        out = self.cache.update(k, v, self.layer_idx)
        self.length += k.shape[-2]
        return out


def layer_caches(cache: Cache, depth: int) -> list[LayerCache]:
    """One adapter per block, all at the cache's current length."""
    length = cache.get_seq_length()
    return [LayerCache(cache, i, length) for i in range(depth)]
