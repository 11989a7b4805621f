"""Models (presets, Hugging Face configs, explicit descriptions), versions and name lookups."""

from __future__ import annotations

import ctypes
import dataclasses
import os
from ctypes import POINTER, byref, c_char_p, c_int32, c_uint32
from typing import Optional, Tuple, Union

from . import _ffi
from ._base import Handle, call, decode, encode, flag, i32, index_arg, to_enum, u32, u64
from .enums import AttentionBackend, ElementFormat, MambaType


def version() -> Tuple[int, int, int]:
    """Runtime version of the loaded library as (major, minor, patch)."""
    v = _ffi.lib().pdkv_version()
    return ((v >> 16) & 0xFF, (v >> 8) & 0xFF, v & 0xFF)


def version_string() -> str:
    """Runtime version string "MAJOR.MINOR.PATCH" of the loaded library."""
    return decode(_ffi.lib().pdkv_version_string())


def status_name(status: int) -> str:
    """The library's stable name of a status (``"PDKV_ERR_TP_NOT_DIVISIBLE"``)."""
    return decode(_ffi.lib().pdkv_status_name(i32("status", status)))


def mamba_type_name(mamba_type: Union[MambaType, int]) -> str:
    """Stable lower-case name of a Mamba type ("mamba2", "gdn", ...; "unknown" otherwise)."""
    return decode(_ffi.lib().pdkv_mamba_type_name(i32("mamba_type", mamba_type)))


def backend_name(backend: Union[AttentionBackend, int]) -> str:
    """Stable name of an attention backend ("flash_attn", ...; "unknown" otherwise)."""
    return decode(_ffi.lib().pdkv_backend_name(i32("backend", backend)))


def backend_from_name(name: str) -> Union[AttentionBackend, int]:
    """Backend from its pdkv or vLLM name, case-insensitive; raises :class:`NotFoundError`. A backend
    the library knows but this package does not is returned as its plain int value."""
    out = c_int32()
    call("pdkv_backend_from_name", encode("name", name), byref(out))
    return to_enum(AttentionBackend, out.value)


def element_format_from_name(name: str) -> Union[ElementFormat, int]:
    """Element format from its canonical or vLLM name, case-insensitive ("fp8_e5m2", "fp8" =
    fp8_e4m3, "bf16", "int8_per_token_head"; "auto": UNKNOWN); raises :class:`NotFoundError`."""
    out = c_int32()
    call("pdkv_element_format_from_name", encode("name", name), byref(out))
    return to_enum(ElementFormat, out.value)


def element_format_name(fmt: Union[ElementFormat, int]) -> str:
    """Canonical name of an element format ("unknown" for UNKNOWN and unknown values)."""
    return decode(_ffi.lib().pdkv_element_format_name(i32("fmt", fmt)))


_CHUNK_BIT = _ffi.FIELD_BITS["PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE"]
_SSM_DTYPE_BIT = _ffi.FIELD_BITS["PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE"]


@dataclasses.dataclass(frozen=True)
class PresetInfo:
    """A built-in model preset."""

    #: Short name, e.g. "nemotron-3-nano-30b".
    name: str
    #: Hugging Face repo id (also accepted by :meth:`Model.from_preset`).
    hf_name: str
    #: Where the preset's numbers come from.
    source: str


def preset_count() -> int:
    """Number of built-in presets."""
    return int(_ffi.lib().pdkv_preset_count())


def preset_at(index: int) -> PresetInfo:
    """Preset ``index``; raises :class:`OutOfBoundsError` past the end."""
    name, hf, src = c_char_p(), c_char_p(), c_char_p()
    call("pdkv_preset_at", index_arg("index", index), byref(name), byref(hf), byref(src))
    return PresetInfo(decode(name.value), decode(hf.value), decode(src.value))


def presets() -> Tuple[PresetInfo, ...]:
    """Every built-in preset, in library order."""
    return tuple(preset_at(i) for i in range(preset_count()))


@dataclasses.dataclass(frozen=True)
class ModelDesc:
    """``pdkv_model_desc_t``: everything pdkv needs to know about a model.

    Input of :meth:`Model.new` and output of :meth:`Model.describe`."""

    #: Model name, e.g. "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16".
    name: str = ""
    #: Where the numbers come from.
    source: str = ""
    #: Total KV heads (MLA: 1).
    num_kv_heads: int = 0
    #: K head dim (MLA: kv_lora_rank + qk_rope_head_dim).
    head_size: int = 0
    #: V head dim (MLA: 0).
    head_size_v: int = 0
    #: Multi-head latent attention.
    use_mla: bool = False
    #: Sliding window in tokens; 0: full attention.
    sliding_window: int = 0
    #: Kind of Mamba-like layers (an int if this package does not know the value).
    mamba_type: Union[MambaType, int] = MambaType.NONE
    #: Mamba2: heads; GDN: value heads.
    mamba_num_heads: int = 0
    #: Mamba2: head dim; GDN: value head dim.
    mamba_head_dim: int = 0
    #: Mamba1/2: d_state; GDN: key head dim.
    mamba_d_state: int = 0
    #: Mamba2: n_groups; GDN: key heads.
    mamba_n_groups: int = 0
    #: Mamba1 only.
    mamba_d_inner: int = 0
    #: d_conv.
    mamba_conv_kernel: int = 0
    #: None: 2048.
    mamba_chunk_size: Optional[int] = None
    #: Speculative tokens add conv rows (NemotronH, GDN).
    mamba_conv_rows_include_spec: bool = False
    #: Model dtype size in bytes, 1..8.
    dtype_bytes: int = 2
    #: The SSM state dtype an engine's "auto" picks; None: the conv dtype.
    default_ssm_dtype_bytes: Optional[int] = None
    #: One char per layer: '*' attention, 'M' Mamba, 'P' both, 'L' MLA-typed attention in a GQA
    #: model, '-' neither; "" = unknown.
    layer_pattern: str = ""
    #: Latent width (elements) of the 'L' layers of a GQA model: one head replicated on every
    #: rank, read whole from one prefill rank. 0: no such layers (a pure MLA model uses use_mla).
    mla_head_size: int = 0

    def _to_c(self) -> _ffi.ModelDescC:
        """The C struct (its strings are kept alive by the struct)."""
        c = _ffi.ModelDescC()
        c.struct_size = ctypes.sizeof(c)
        c.name = encode("name", self.name)
        c.source = encode("source", self.source)
        c.num_kv_heads = u32("num_kv_heads", self.num_kv_heads)
        c.head_size = u32("head_size", self.head_size)
        c.head_size_v = u32("head_size_v", self.head_size_v)
        c.use_mla = flag("use_mla", self.use_mla)
        c.sliding_window = u32("sliding_window", self.sliding_window)
        c.mamba_type = i32("mamba_type", self.mamba_type)
        c.mamba_num_heads = u32("mamba_num_heads", self.mamba_num_heads)
        c.mamba_head_dim = u32("mamba_head_dim", self.mamba_head_dim)
        c.mamba_d_state = u32("mamba_d_state", self.mamba_d_state)
        c.mamba_n_groups = u32("mamba_n_groups", self.mamba_n_groups)
        c.mamba_d_inner = u64("mamba_d_inner", self.mamba_d_inner)
        c.mamba_conv_kernel = u32("mamba_conv_kernel", self.mamba_conv_kernel)
        if self.mamba_chunk_size is not None:
            c.field_mask |= _ffi.FIELD_BITS["PDKV_MODEL_FIELD_MAMBA_CHUNK_SIZE"]
            c.mamba_chunk_size = u32("mamba_chunk_size", self.mamba_chunk_size)
        c.mamba_conv_rows_include_spec = flag("mamba_conv_rows_include_spec", self.mamba_conv_rows_include_spec)
        c.dtype_bytes = u32("dtype_bytes", self.dtype_bytes)
        if self.default_ssm_dtype_bytes is not None:
            c.field_mask |= _ffi.FIELD_BITS["PDKV_MODEL_FIELD_DEFAULT_SSM_DTYPE"]
            c.default_ssm_dtype_bytes = u32("default_ssm_dtype_bytes", self.default_ssm_dtype_bytes)
        c.layer_pattern = encode("layer_pattern", self.layer_pattern)
        c.mla_head_size = u32("mla_head_size", self.mla_head_size)
        return c

    @staticmethod
    def _from_c(c: _ffi.ModelDescC) -> "ModelDesc":
        return ModelDesc(
            name=decode(c.name),
            source=decode(c.source),
            num_kv_heads=c.num_kv_heads,
            head_size=c.head_size,
            head_size_v=c.head_size_v,
            use_mla=bool(c.use_mla),
            sliding_window=c.sliding_window,
            mamba_type=to_enum(MambaType, c.mamba_type),
            mamba_num_heads=c.mamba_num_heads,
            mamba_head_dim=c.mamba_head_dim,
            mamba_d_state=c.mamba_d_state,
            mamba_n_groups=c.mamba_n_groups,
            mamba_d_inner=c.mamba_d_inner,
            mamba_conv_kernel=c.mamba_conv_kernel,
            mamba_chunk_size=c.mamba_chunk_size if c.field_mask & _CHUNK_BIT else None,
            mamba_conv_rows_include_spec=bool(c.mamba_conv_rows_include_spec),
            dtype_bytes=c.dtype_bytes,
            default_ssm_dtype_bytes=c.default_ssm_dtype_bytes if c.field_mask & _SSM_DTYPE_BIT else None,
            layer_pattern=decode(c.layer_pattern),
            mla_head_size=c.mla_head_size,
        )


class Model(Handle):
    """An immutable model description (``pdkv_model_t``). Create it with :meth:`from_preset`,
    :meth:`from_hf_config_file`, :meth:`from_hf_config_json` or :meth:`new`. Queries are
    thread-safe."""

    _free_name = "pdkv_model_free"

    def __init__(self) -> None:
        raise TypeError("use Model.from_preset / from_hf_config_file / from_hf_config_json / new")

    @classmethod
    def _make(cls, fn: str, *args: object) -> "Model":
        out = POINTER(_ffi.ModelT)()
        call(fn, *args, byref(out))
        self = object.__new__(cls)
        self._adopt(out)
        return self

    @classmethod
    def new(cls, desc: ModelDesc) -> "Model":
        """A model from an explicit description; raises :class:`InvalidArgumentError` for bad values."""
        if not isinstance(desc, ModelDesc):
            raise TypeError(f"desc must be a pdkv.ModelDesc, got {type(desc).__name__}")
        c = desc._to_c()
        return cls._make("pdkv_model_new", byref(c))

    @classmethod
    def from_preset(cls, name: str) -> "Model":
        """A built-in preset by short name or Hugging Face id (case-insensitive); raises
        :class:`NotFoundError`."""
        return cls._make("pdkv_model_from_preset", encode("name", name))

    @classmethod
    def from_hf_config_file(cls, path: Union[str, "os.PathLike[str]"], name: Optional[str] = None) -> "Model":
        """A model from a Hugging Face config.json file; ``name`` overrides the stored name.
        Raises :class:`PdkvIOError` (unreadable path), :class:`ParseError` (malformed JSON),
        :class:`NotFoundError` (a required key is missing), :class:`InvalidArgumentError` (a key
        of the wrong type or value), :class:`UnsupportedMambaTypeError` (a hybrid ``model_type``
        pdkv has no rule for)."""
        return cls._make(
            "pdkv_model_from_hf_config_file", encode("path", path), encode("name", name, allow_none=True)
        )

    @classmethod
    def from_hf_config_json(cls, json_text: Union[str, bytes], name: Optional[str] = None) -> "Model":
        """A model from the text of a Hugging Face config.json (str or UTF-8 bytes); raises as
        :meth:`from_hf_config_file` except for :class:`PdkvIOError`."""
        if isinstance(json_text, str):
            data = json_text.encode("utf-8")
        elif isinstance(json_text, (bytes, bytearray)):
            data = bytes(json_text)
        else:
            raise TypeError(f"json_text must be str or bytes, got {type(json_text).__name__}")
        return cls._make(
            "pdkv_model_from_hf_config_json", data, len(data), encode("name", name, allow_none=True)
        )

    def describe(self) -> ModelDesc:
        """The model's full description."""
        c = _ffi.ModelDescC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_model_describe", self._p(), byref(c))
        return ModelDesc._from_c(c)

    @property
    def name(self) -> str:
        """The model's name."""
        return self.describe().name

    def layer_counts(self) -> Tuple[int, int]:
        """(attention layers, Mamba layers) from the layer pattern."""
        a, m = c_uint32(), c_uint32()
        call("pdkv_model_layer_counts", self._p(), byref(a), byref(m))
        return a.value, m.value

    def __repr__(self) -> str:
        if self.closed:
            return "<pdkv.Model closed>"
        return f"<pdkv.Model {self.name!r}>"
