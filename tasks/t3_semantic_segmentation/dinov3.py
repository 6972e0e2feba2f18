# =============================================================================
# dinov3.py for T3 (semantic segmentation): LOCKED.
# Do not modify: the harness evaluates with the original copy of this file.
#
# The two DINOv3 backbones that T3 provides (paper section 3.2), re-implemented in plain PyTorch so that
# their state dicts match the official checkpoint files key for key and shape for shape: the files in
# weights/ load into them with strict=True. Architectures as in facebookresearch/dinov3
# (dinov3/models/convnext.py and dinov3/models/vision_transformer.py); the code here is our own.
#
#   convnext_tiny()  ConvNeXt-Tiny, 27,820,128 parameters, 182 state-dict keys.
#                    stage_outputs(x) -> 4 feature maps at strides 4, 8, 16, 32 with 96, 192, 384, 768 channels
#   vit_small()      ViT-S/16 with 4 storage ("register") tokens and RoPE, 21,601,152 parameters, 188 keys.
#                    get_intermediate_layers(x, n=[2, 5, 8, 11], reshape=True) -> 4 maps at stride 16, 384 channels
#
#   load_backbone_weights(model, "weights/<file>.pth")   strict load, with a clear error on any mismatch
#   check_weights(path) -> {"ok", "arch", "n_params", "file"}   (prepare.py --check-weights PATH)
#
# Both backbones expect RGB images normalised with the ImageNet mean and std (prepare.normalize()).
# Input sides should be multiples of 32 (ConvNeXt) or 16 (ViT); 224 x 224 is both.
# The weights are Meta's, under the DINOv3 License; the harness copies them into weights/.
# =============================================================================

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

WEIGHTS_DIR = "weights"


def drop_path(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Stochastic depth: zero the residual branch of a random fraction p of the samples (and rescale the rest)."""
    if p == 0.0 or not training:
        return x
    keep = torch.rand((x.shape[0],) + (1,) * (x.dim() - 1), device=x.device) >= p
    return x * keep.to(x.dtype) / (1.0 - p)


# ---------------------------------------------------------------------------
# ConvNeXt-Tiny (Liu et al., 2022), the DINOv3 variant
# ---------------------------------------------------------------------------


class LayerNorm(nn.Module):
    """LayerNorm over channels, for NHWC tensors ("channels_last") or NCHW maps ("channels_first").

    channels_first normalises every pixel over its C channels (biased variance, eps inside the square root):
    the same as permuting to NHWC, F.layer_norm, and permuting back, which is how it is computed here.
    """

    def __init__(self, dim: int, eps: float = 1e-6, data_format: str = "channels_last"):
        super().__init__()
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError(f"data_format must be channels_last or channels_first, not {data_format!r}")
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps
        self.data_format = data_format

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        x = x.permute(0, 2, 3, 1)
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps).permute(0, 3, 1, 2)


class Block(nn.Module):
    """x + gamma * MLP(LN(depthwise 7x7 conv(x))): the MLP (4x wider, exact GELU) runs on NHWC with Linear layers."""

    def __init__(self, dim: int, drop_path: float = 0.0, layer_scale_init_value: float = 1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = LayerNorm(dim, eps=1e-6)  # channels_last
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale_init_value))  # layer scale, key stages.i.j.gamma
        self.layer_scale_init_value = layer_scale_init_value
        self.drop_path = drop_path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)  # NCHW -> NHWC
        y = self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        y = (self.gamma * y).permute(0, 3, 1, 2)  # NHWC -> NCHW
        return x + drop_path(y, self.drop_path, self.training)


class ConvNeXt(nn.Module):
    """ConvNeXt as in DINOv3: a stem + 3 downsamplers, 4 stages of Blocks, a final LayerNorm, no classifier.

    Module layout (= the state-dict keys of the official files):
      downsample_layers.0 = (Conv2d k4 s4, channels_first LN)        the stem: stride 4
      downsample_layers.i = (channels_first LN, Conv2d k2 s2), i=1..3  stride x2 each
      stages.i            = depths[i] Blocks at dims[i] channels
      norm                = nn.LayerNorm(dims[-1], eps=1e-6), the final norm
      norms               = [Identity, Identity, Identity, norm]: the per-stage output norms. norms.3 IS norm
                            (the same module registered twice), so a state dict holds norm.* and norms.3.*.
    """

    def __init__(
        self,
        in_chans: int = 3,
        depths: Sequence[int] = (3, 3, 9, 3),
        dims: Sequence[int] = (96, 192, 384, 768),
        drop_path_rate: float = 0.0,
        layer_scale_init_value: float = 1e-6,
    ):
        super().__init__()
        self.downsample_layers = nn.ModuleList(
            [nn.Sequential(nn.Conv2d(in_chans, dims[0], 4, stride=4), LayerNorm(dims[0], 1e-6, "channels_first"))]
        )
        for i in range(1, 4):
            self.downsample_layers.append(
                nn.Sequential(LayerNorm(dims[i - 1], 1e-6, "channels_first"), nn.Conv2d(dims[i - 1], dims[i], 2, 2))
            )
        rates = torch.linspace(0, drop_path_rate, sum(depths)).tolist()  # stochastic depth grows with depth
        self.stages = nn.ModuleList()
        for i in range(4):
            first = sum(depths[:i])
            self.stages.append(
                nn.Sequential(*(Block(dims[i], rates[first + j], layer_scale_init_value) for j in range(depths[i])))
            )
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Identity()
        self.norms = nn.ModuleList([nn.Identity(), nn.Identity(), nn.Identity(), self.norm])
        self.embed_dim = dims[-1]
        self.embed_dims = list(dims)
        self.n_blocks = 4
        self.n_storage_tokens = 0
        self.init_weights()

    def init_weights(self) -> None:
        """DINOv3's initialisation (it only matters without pretrained weights)."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.LayerNorm, LayerNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, Block):
                nn.init.constant_(m.gamma, m.layer_scale_init_value)

    def _apply_norm(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """norms[i] on an NCHW map (the final norm is a channels_last LayerNorm)."""
        if isinstance(self.norms[i], nn.Identity):
            return x
        return self.norms[i](x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    def stage_outputs(self, x: torch.Tensor, norm: bool = True) -> list[torch.Tensor]:
        """The output of each stage, NCHW: strides 4, 8, 16, 32; channels 96, 192, 384, 768 (Tiny).

        With norm=True (as the DINOv3 dense-prediction code) the last map goes through the final LayerNorm and
        the others are left as they are (norms[0..2] are Identity). 224 x 224 in -> 56, 28, 14, 7 pixels a side.
        """
        outputs = []
        for i in range(4):
            x = self.stages[i](self.downsample_layers[i](x))
            outputs.append(self._apply_norm(i, x) if norm else x)
        return outputs

    def forward_features(self, x: torch.Tensor) -> dict:
        """As DINOv3: the final norm over [mean-pooled token; the last stage's pixels as tokens]."""
        x = self.stage_outputs(x, norm=False)[-1]
        tokens = x.flatten(2).transpose(1, 2)  # [B, HW, C]
        x_norm = self.norm(torch.cat([x.mean(dim=(2, 3)).unsqueeze(1), tokens], dim=1))
        return {
            "x_norm_clstoken": x_norm[:, 0],
            "x_storage_tokens": x_norm[:, 1:1],
            "x_norm_patchtokens": x_norm[:, 1:],
            "x_prenorm": tokens,
            "masks": None,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled, normalised feature [B, 768] (head is Identity)."""
        return self.head(self.forward_features(x)["x_norm_clstoken"])

    def get_intermediate_layers(
        self,
        x: torch.Tensor,
        n: int | Sequence[int] = 1,
        reshape: bool = False,
        return_class_token: bool = False,
        norm: bool = True,
    ) -> tuple:
        """DINOv3's interface: the outputs of stages n (a list) or of the last n stages (an int).

        Each output is [B, H*W, C] tokens, or an NCHW map with reshape=True; with return_class_token, a pair
        (output, mean-pooled [B, C]). norm=True applies norms[i] (only the last stage has a real norm).
        """
        take = range(4 - n, 4) if isinstance(n, int) else list(n)
        outputs = []
        for i in range(4):
            x = self.stages[i](self.downsample_layers[i](x))
            if i in take:
                cls = x.mean(dim=(2, 3))
                patches = x
                if norm and not isinstance(self.norms[i], nn.Identity):
                    cls = self.norms[i](cls)
                    patches = self._apply_norm(i, patches)
                outputs.append((patches if reshape else patches.flatten(2).transpose(1, 2), cls))
        if return_class_token:
            return tuple(outputs)
        return tuple(out for out, _ in outputs)


def convnext_tiny(**kwargs) -> ConvNeXt:
    """ConvNeXt-Tiny (depths 3-3-9-3, dims 96-192-384-768), randomly initialised: load weights with
    load_backbone_weights(model, "weights/dinov3_convnext_tiny_pretrain_lvd1689m-21b726bb.pth")."""
    return ConvNeXt(depths=(3, 3, 9, 3), dims=(96, 192, 384, 768), **kwargs)


# ---------------------------------------------------------------------------
# ViT-S/16 (DinoVisionTransformer), with storage tokens and rotary position embeddings
# ---------------------------------------------------------------------------


class PatchEmbed(nn.Module):
    """16 x 16 patches -> embed_dim channels by a strided convolution; returns [B, H/16, W/16, embed_dim]."""

    def __init__(self, patch_size: int = 16, in_chans: int = 3, embed_dim: int = 384):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(x).permute(0, 2, 3, 1))


class RopePositionEmbedding(nn.Module):
    """Axial rotary position embedding of DINOv3 (no parameters; one persistent buffer `periods`).

    periods[k] = base ** (2k / (D_head / 2)) for k < D_head / 4 (D_head = 64: 16 periods from 1 to ~75).
    A patch centre (row i, column j) of an H x W grid gets the coordinates ((i + 0.5) / H, (j + 0.5) / W)
    mapped to [-1, 1]; its angles are 2 pi coord / period, all row angles then all column angles (32), tiled
    twice (64 = D_head). forward() returns (sin, cos), each [H*W, D_head], in float32.
    In train mode only, rescale_coords = s multiplies the coordinates by one random factor in [1/s, s] per
    forward pass (log-uniform), as the official ViT-S/16 does (s = 2); pass None to turn that off.
    """

    def __init__(self, embed_dim: int, num_heads: int, base: float = 100.0, rescale_coords: float | None = None):
        super().__init__()
        d_head = embed_dim // num_heads
        if d_head % 4:
            raise ValueError(f"head dimension {d_head} must be a multiple of 4 for axial RoPE")
        exponents = 2 * torch.arange(d_head // 4, dtype=torch.float32) / (d_head // 2)
        self.register_buffer("periods", base**exponents, persistent=True)
        self.rescale_coords = rescale_coords

    def forward(self, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
        dd = {"device": self.periods.device, "dtype": torch.float32}
        coords_h = (torch.arange(H, **dd) + 0.5) / H
        coords_w = (torch.arange(W, **dd) + 0.5) / W
        coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"), dim=-1).flatten(0, 1)  # [HW, 2]
        coords = 2.0 * coords - 1.0
        if self.training and self.rescale_coords is not None:
            log_s = math.log(self.rescale_coords)
            coords = coords * torch.empty(1, **dd).uniform_(-log_s, log_s).exp()
        angles = 2 * math.pi * coords[:, :, None] / self.periods.float()[None, None, :]  # [HW, 2, D_head / 4]
        angles = angles.flatten(1, 2).tile(2)  # [HW, D_head]
        return torch.sin(angles), torch.cos(angles)


def rope_apply(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """Rotate feature pairs (x[d], x[d + D/2]) by the angles: x cos + rotate_half(x) sin."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class LinearKMaskedBias(nn.Linear):
    """The qkv projection: its bias is multiplied by the persistent buffer `bias_mask` (1 for q and v, 0 for k)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__(in_features, out_features, bias=bias)
        if out_features % 3:
            raise ValueError("LinearKMaskedBias needs 3 equal parts (q, k, v)")
        mask = torch.ones(out_features)
        mask[out_features // 3 : 2 * out_features // 3] = 0.0  # no bias on the keys
        self.register_buffer("bias_mask", mask, persistent=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias * self.bias_mask.to(self.bias.dtype) if self.bias is not None else None
        return F.linear(x, self.weight, bias)


class SelfAttention(nn.Module):
    """Multi-head attention (scaled_dot_product_attention, scale head_dim ** -0.5) with RoPE on the patch tokens."""

    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = LinearKMaskedBias(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # each [B, heads, N, head_dim]
        if rope is not None:
            sin, cos = rope
            prefix = N - sin.shape[-2]  # cls + storage tokens: no rotation
            q_rot = rope_apply(q[:, :, prefix:].float(), sin, cos).to(q.dtype)  # in float32, as DINOv3
            k_rot = rope_apply(k[:, :, prefix:].float(), sin, cos).to(k.dtype)
            q = torch.cat([q[:, :, :prefix], q_rot], dim=2)
            k = torch.cat([k[:, :, :prefix], k_rot], dim=2)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class LayerScale(nn.Module):
    def __init__(self, dim: int, init_values: float = 1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), init_values))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SelfAttentionBlock(nn.Module):
    """x + ls1(attn(norm1(x))), then x + ls2(mlp(norm2(x))); LayerNorm eps 1e-5."""

    def __init__(self, dim: int, num_heads: int, ffn_ratio: float, layerscale_init: float, eps: float, dp: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = SelfAttention(dim, num_heads)
        self.ls1 = LayerScale(dim, layerscale_init)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, int(dim * ffn_ratio))
        self.ls2 = LayerScale(dim, layerscale_init)
        self.drop_path = dp

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        x = x + drop_path(self.ls1(self.attn(self.norm1(x), rope)), self.drop_path, self.training)
        return x + drop_path(self.ls2(self.mlp(self.norm2(x))), self.drop_path, self.training)


class DinoVisionTransformer(nn.Module):
    """DINOv3's ViT: tokens [cls, storage tokens, patches], RoPE instead of a position embedding, a final LayerNorm.

    Module layout (= the state-dict keys of the official files): cls_token [1, 1, D], storage_tokens
    [1, n_storage, D], mask_token [1, D] (2-D; only used for masked pre-training), patch_embed.proj, rope_embed.periods
    (buffer), blocks.b.{norm1, attn.qkv (+ buffer bias_mask), attn.proj, ls1.gamma, norm2, mlp.fc1, mlp.fc2,
    ls2.gamma}, norm.
    """

    def __init__(
        self,
        patch_size: int = 16,
        in_chans: int = 3,
        embed_dim: int = 384,
        depth: int = 12,
        num_heads: int = 6,
        ffn_ratio: float = 4.0,
        n_storage_tokens: int = 4,
        layerscale_init: float = 1e-5,
        norm_eps: float = 1e-5,
        rope_base: float = 100.0,
        rope_rescale_coords: float | None = 2.0,
        drop_path_rate: float = 0.0,
    ):
        super().__init__()
        self.embed_dim = self.num_features = embed_dim
        self.patch_size = patch_size
        self.n_blocks = depth
        self.num_heads = num_heads
        self.n_storage_tokens = n_storage_tokens
        self.patch_embed = PatchEmbed(patch_size, in_chans, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.storage_tokens = nn.Parameter(torch.zeros(1, n_storage_tokens, embed_dim))
        self.rope_embed = RopePositionEmbedding(embed_dim, num_heads, rope_base, rope_rescale_coords)
        self.blocks = nn.ModuleList(
            SelfAttentionBlock(embed_dim, num_heads, ffn_ratio, layerscale_init, norm_eps, drop_path_rate)
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.head = nn.Identity()
        self.mask_token = nn.Parameter(torch.zeros(1, embed_dim))
        self.init_weights()

    def init_weights(self) -> None:
        """DINOv3's initialisation (it only matters without pretrained weights)."""
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.storage_tokens, std=0.02)
        nn.init.zeros_(self.mask_token)
        bound = 1 / math.sqrt(self.patch_embed.proj.in_channels * self.patch_size**2)
        nn.init.uniform_(self.patch_embed.proj.weight, -bound, bound)
        nn.init.uniform_(self.patch_embed.proj.bias, -bound, bound)
        for m in self.blocks.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def prepare_tokens(self, x: torch.Tensor, masks: torch.Tensor | None = None) -> tuple[torch.Tensor, int, int]:
        """Images [B, 3, H, W] -> tokens [B, 1 + n_storage + HW/256, D]; masks [B, HW] (bool) -> mask_token there."""
        x = self.patch_embed(x)
        B, H, W, _ = x.shape
        x = x.flatten(1, 2)
        if masks is not None:
            x = torch.where(masks.unsqueeze(-1), self.mask_token.to(x.dtype).unsqueeze(0), x)
            cls = self.cls_token
        else:
            cls = self.cls_token + 0 * self.mask_token  # keeps mask_token in the graph, as the original
        x = torch.cat([cls.expand(B, -1, -1), self.storage_tokens.expand(B, -1, -1), x], dim=1)
        return x, H, W

    def _run_blocks(self, x: torch.Tensor, H: int, W: int, take: Sequence[int] = ()) -> tuple[torch.Tensor, list]:
        taken = []
        for i, block in enumerate(self.blocks):
            x = block(x, self.rope_embed(H=H, W=W))
            if i in take:
                taken.append(x)
        return x, taken

    def forward_features(self, x: torch.Tensor, masks: torch.Tensor | None = None) -> dict:
        x, H, W = self.prepare_tokens(x, masks)
        x, _ = self._run_blocks(x, H, W)
        x_norm = self.norm(x)
        k = self.n_storage_tokens + 1
        return {
            "x_norm_clstoken": x_norm[:, 0],
            "x_storage_tokens": x_norm[:, 1:k],
            "x_norm_patchtokens": x_norm[:, k:],
            "x_prenorm": x,
            "masks": masks,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The normalised class token [B, D] (head is Identity)."""
        return self.head(self.forward_features(x)["x_norm_clstoken"])

    def get_intermediate_layers(
        self,
        x: torch.Tensor,
        *,
        n: int | Sequence[int] = 1,
        reshape: bool = False,
        return_class_token: bool = False,
        return_extra_tokens: bool = False,
        norm: bool = True,
    ) -> tuple:
        """The outputs of blocks n (a list; DINOv3's segmentation code takes [2, 5, 8, 11]) or of the last n.

        norm=True applies the final LayerNorm to each; the cls and storage tokens are then split off. Each output
        is [B, HW, D] patch tokens, or [B, D, H/16, W/16] with reshape=True; return_class_token /
        return_extra_tokens make each item a tuple (patches, cls [B, D], storage [B, n_storage, D]).
        """
        take = range(self.n_blocks - n, self.n_blocks) if isinstance(n, int) else list(n)
        tokens, H, W = self.prepare_tokens(x)
        _, outputs = self._run_blocks(tokens, H, W, take)
        if len(outputs) != len(take):
            raise ValueError(f"blocks {list(take)} requested, only {self.n_blocks} exist")
        if norm:
            outputs = [self.norm(out) for out in outputs]
        k = self.n_storage_tokens + 1
        cls_tokens = [out[:, 0] for out in outputs]
        extra = [out[:, 1:k] for out in outputs]
        patches = [out[:, k:] for out in outputs]
        if reshape:
            patches = [p.reshape(x.shape[0], H, W, -1).permute(0, 3, 1, 2).contiguous() for p in patches]
        if return_class_token and return_extra_tokens:
            return tuple(zip(patches, cls_tokens, extra, strict=True))
        if return_class_token:
            return tuple(zip(patches, cls_tokens, strict=True))
        if return_extra_tokens:
            return tuple(zip(patches, extra, strict=True))
        return tuple(patches)


def vit_small(**kwargs) -> DinoVisionTransformer:
    """ViT-S/16 of DINOv3 (384 wide, 12 blocks, 6 heads, 4 storage tokens), randomly initialised: load weights with
    load_backbone_weights(model, "weights/dinov3_vits16_pretrain_lvd1689m-08c60483.pth")."""
    return DinoVisionTransformer(patch_size=16, embed_dim=384, depth=12, num_heads=6, ffn_ratio=4.0, **kwargs)


# ---------------------------------------------------------------------------
# The weight files
# ---------------------------------------------------------------------------

# name -> (file name in weights/, constructor). The files are the official releases (flat state dicts).
WEIGHTS = {
    "convnext_tiny": ("dinov3_convnext_tiny_pretrain_lvd1689m-21b726bb.pth", convnext_tiny),
    "vit_small": ("dinov3_vits16_pretrain_lvd1689m-08c60483.pth", vit_small),
}


def weights_path(name: str) -> str:
    """weights/<official file name> of a backbone ("convnext_tiny" or "vit_small")."""
    return os.path.join(WEIGHTS_DIR, WEIGHTS[name][0])


def read_state_dict(path: str) -> dict:
    """The flat {name: tensor} dict of a weights file (torch.load with weights_only: a file cannot run code)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path} not found: the pretrained DINOv3 weights were not provided to this run (the harness copies "
            f"them into {WEIGHTS_DIR}/ once the user has installed them with `bench weights install FILE`). "
            'Set config["pretrained"] = None to train from a random initialisation instead.'
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"cannot read {path} as a PyTorch state dict: {e}") from e
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        keys = list(state)[:5] if isinstance(state, dict) else type(state).__name__
        raise ValueError(
            f"{path} is not a flat state dict of tensors (found {keys}): expected the official DINOv3 file, "
            "which maps parameter names to tensors directly"
        )
    return state


def _strict_load(module: nn.Module, state: dict, path: str) -> None:
    """load_state_dict(strict=True), after a comparison that names what does not fit."""
    expected = module.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k}: file {tuple(state[k].shape)} vs model {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    if missing or unexpected or shapes:
        problems = []
        for label, items in (("missing", missing), ("unexpected", unexpected), ("of another shape", shapes)):
            if items:
                problems.append(f"{len(items)} {label} (e.g. {', '.join(items[:3])})")
        raise ValueError(
            f"{path} does not fit {type(module).__name__} under a strict load: {'; '.join(problems)}. "
            "Use the official, unconverted DINOv3 file (timm and Hugging Face copies rename the keys); "
            "run `bench weights install FILE` with the file from Meta's download page to install it."
        )
    module.load_state_dict(state, strict=True)


def load_backbone_weights(module: nn.Module, path: str) -> nn.Module:
    """Load an official DINOv3 file into convnext_tiny() or vit_small() with strict=True; returns the module.

    A missing file, a file that is not a flat state dict, and any missing, unexpected or reshaped key raise
    an error that says what to do.
    """
    _strict_load(module, read_state_dict(path), path)
    return module


def check_weights(path: str) -> dict:
    """Verify a weights file: it loads strictly into its architecture and gives finite features.

    The architecture is found from the official file name, else from the keys. Returns
    {"ok": True, "arch": name, "n_params": parameters of the backbone, "file": base name}; raises otherwise.
    """
    state = read_state_dict(path)
    name = next((n for n, (file, _) in WEIGHTS.items() if os.path.basename(path) == file), None)
    if name is None:
        name = "vit_small" if "storage_tokens" in state else "convnext_tiny"
    model = WEIGHTS[name][1]()
    _strict_load(model, state, path)
    model.eval()
    with torch.no_grad():
        x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
        out = model.forward_features(x)["x_norm_patchtokens"]
    if not torch.isfinite(out).all():
        raise ValueError(f"{path} loads, but {name} gives non-finite features with it: the file is corrupt")
    return {
        "ok": True,
        "arch": name,
        "n_params": sum(p.numel() for p in model.parameters()),
        "file": os.path.basename(path),
    }
