package pdkv

import (
	"errors"
	"strings"
	"testing"
)

// pdkv.h's growth rule through the Go API: a nil optional field is unset (its C field_mask bit
// clear, the library's default applies), a Ptr value sets it; no mask is visible.

func TestOptionalEngineConfigFields(t *testing.T) {
	m := nano(t)
	c := DefaultEngineConfig()
	c.TpSize = 2
	g, err := NewGeometry(m, c)
	must(t, err)
	derived, err := g.Info()
	must(t, err)
	if derived.BlockSize == 4096 {
		t.Fatalf("derived block size is already 4096")
	}
	c.UserBlockSize = Ptr[uint32](4096)
	g, err = NewGeometry(m, c)
	must(t, err)
	set, err := g.Info()
	must(t, err)
	if set.BlockSize != 4096 {
		t.Fatalf("a set UserBlockSize was not read: block size %d", set.BlockSize)
	}
	c.KVCacheDtypeBytes = Ptr[uint32](0)
	if _, err := NewGeometry(m, c); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "kv_cache_dtype_bytes = 0 with PDKV_CONFIG_FIELD_KV_CACHE_DTYPE") {
		t.Fatalf("a set 0 dtype: %v", err)
	}
}

func TestOptionalEngineLayoutFields(t *testing.T) {
	m := nano(t)
	c := DefaultEngineConfig()
	info := func(l EngineLayout) EngineMetadataInfo {
		md, err := EngineMetadataFromModel(m, c, l)
		must(t, err)
		i, err := md.Info()
		must(t, err)
		return i
	}
	l := DefaultEngineLayout()
	if i := info(l); i.PrefixCaching || i.PpSize != 1 || i.LayerEnd != 0 {
		t.Fatalf("unset fields: %+v", i)
	}
	l.PrefixCaching = Ptr(true)
	l.PpSize, l.LayerEnd = 2, Ptr[uint32](26)
	if i := info(l); !i.PrefixCaching || i.PpSize != 2 || i.LayerEnd != 26 {
		t.Fatalf("set fields: %+v", i)
	}
}

func TestOptionalTrimFields(t *testing.T) {
	in := GroupTrimInput{Kind: GroupAttention, LocalBlocks: []uint64{3, 4}, RemoteBlocks: []uint64{8, 9},
		LocalTokensPerBlock: Ptr[uint64](16), RemoteTokensPerBlock: Ptr[uint64](16), RemoteComputedTokens: 32}
	tr, err := NewGroupTrim(in)
	must(t, err)
	if _, n, err := tr.Summary(); err != nil || n != 32 {
		t.Fatalf("unset first block: %d %v", n, err)
	}
	in.LocalFirstBlock = Ptr[uint64](2) // tokens 0..31 then have no slot
	if _, err := NewGroupTrim(in); !errors.Is(err, ErrCoverage) {
		t.Fatalf("a set first block was not read: %v", err)
	}
	in.LocalFirstBlock, in.LocalTokensPerBlock, in.RemoteTokensPerBlock = nil, nil, nil
	if _, err := NewGroupTrim(in); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "PDKV_TRIM_FIELD_TOKENS_PER_BLOCK") {
		t.Fatalf("unset tokens per block: %v", err)
	}
}
