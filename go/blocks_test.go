package pdkv

import (
	"reflect"
	"testing"
)

func TestBlockIDs(t *testing.T) {
	ids, err := LogicalToKernelBlockIDs([]uint64{0, 1, 2}, GroupAttention, 2)
	must(t, err)
	if !reflect.DeepEqual(ids, []uint64{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("kernel ids %v", ids)
	}
	ids, err = LogicalToKernelBlockIDs(nil, GroupAttention, 2)
	must(t, err)
	if ids == nil || len(ids) != 0 {
		t.Fatalf("empty input gave %#v", ids)
	}
	_, err = LogicalToKernelBlockIDs([]uint64{1}, GroupAttention, 0)
	wantErr(t, err, ErrInvalidArgument)
	_, err = LogicalToKernelBlockIDs([]uint64{1}, GroupKind(7), 1)
	wantErr(t, err, ErrInvalidArgument, "7")
	_, err = LogicalToKernelBlockIDs([]uint64{^uint64(0)}, GroupAttention, 2)
	wantErr(t, err, ErrOverflow)
	if GroupSlidingWindow.String() != "sliding_window" || GroupKind(9).String() != "unknown" {
		t.Fatal("group kind names")
	}
	if _, err := GroupKindFromName("attn"); err == nil {
		t.Fatal("unknown kind name accepted")
	}

	ids, err = MapBlockIDsForBlockSizeRatio([]uint64{3, 7}, GroupAttention, 4, 6)
	must(t, err)
	if !reflect.DeepEqual(ids, []uint64{12, 13, 14, 15, 28, 29}) {
		t.Fatalf("bsr ids %v", ids)
	}
	_, err = MapBlockIDsForBlockSizeRatio([]uint64{3}, GroupAttention, 0, 6)
	wantErr(t, err, ErrInvalidArgument)

	ids, err = DescriptorIDs([]GroupBlockIDs{{GroupAttention, []uint64{3, 5}}, {GroupMamba, []uint64{1, 2}}},
		DescriptorLayout{NumBlocks: 100, BlockSizeRatio: 1, BlocksPerLogical: 1, NumAttentionRegions: 2, NumMambaRegions: 4})
	must(t, err)
	if !reflect.DeepEqual(ids, []uint64{3, 5, 103, 105, 201, 202, 301, 302, 401, 402, 501, 502}) {
		t.Fatalf("descriptor ids %v", ids)
	}
	_, err = DescriptorIDs([]GroupBlockIDs{{GroupAttention, []uint64{100}}},
		DescriptorLayout{NumBlocks: 100, BlockSizeRatio: 1, BlocksPerLogical: 1, NumAttentionRegions: 1})
	wantErr(t, err, ErrOutOfBounds, "100")
	_, err = DescriptorIDs(nil, DescriptorLayout{})
	wantErr(t, err, ErrInvalidArgument)

	ids, err = MambaDescriptorIDs([]uint64{3, 7}, 10, 2, 4, 1000)
	must(t, err)
	if len(ids) != 16 || ids[0] != 1003 || ids[15] != 1077 {
		t.Fatalf("mamba descriptor ids %v", ids)
	}
	_, err = MambaDescriptorIDs([]uint64{10}, 10, 2, 4, 0)
	wantErr(t, err, ErrOutOfBounds, "10")
	max := ^uint64(0)
	_, err = MambaDescriptorIDs([]uint64{3, 7}, max, max, 4, max)
	wantErr(t, err, ErrOverflow)
}

func TestClippingAndZeroing(t *testing.T) {
	n, err := SlidingWindowBlocksToKeep(2048, 16)
	must(t, err)
	if n != 129 {
		t.Fatalf("blocks to keep %d", n)
	}
	_, err = SlidingWindowBlocksToKeep(2048, 0)
	wantErr(t, err, ErrInvalidArgument)

	ids, err := ClipExchangeBlocks([]uint64{0, 0, 7, 8, 9}, ExchangeClipParams{Kind: GroupMamba, HMAEnabled: true, CacheMode: MambaCacheAlign, NumSpeculativeBlocks: 2})
	must(t, err)
	if !reflect.DeepEqual(ids, []uint64{7}) {
		t.Fatalf("clipped %v", ids)
	}
	ids, err = ClipExchangeBlocks([]uint64{0, 0, 7, 8, 9}, ExchangeClipParams{Kind: GroupMamba, NumSpeculativeBlocks: 2})
	must(t, err)
	if !reflect.DeepEqual(ids, []uint64{0, 0, 7, 8, 9}) {
		t.Fatalf("without HMA the list passes unchanged, got %v", ids)
	}
	_, err = ClipExchangeBlocks([]uint64{1}, ExchangeClipParams{Kind: GroupSlidingWindow, HMAEnabled: true, SlidingWindow: 64})
	wantErr(t, err, ErrInvalidArgument, "block_size")
	_, err = ClipExchangeBlocks([]uint64{1}, ExchangeClipParams{Kind: GroupMamba, HMAEnabled: true, CacheMode: MambaCacheMode(5)})
	wantErr(t, err, ErrInvalidArgument, "5")

	z, err := ReceiveZeroRanges([]uint64{11, 12, 13}, 64, 4, 6)
	must(t, err)
	if !reflect.DeepEqual(z, []ZeroRange{{12, 32, 64}, {13, 0, 64}}) {
		t.Fatalf("zero ranges %v", z)
	}
	_, err = ReceiveZeroRanges([]uint64{11}, 30, 4, 1)
	wantErr(t, err, ErrInvalidArgument, "30")

	z, err = UncoveredTokenRanges([]uint64{5, 6, 7}, 2, 16, 32, []TokenInterval{{32, 70}})
	must(t, err)
	if !reflect.DeepEqual(z, []ZeroRange{{7, 6, 16}}) {
		t.Fatalf("uncovered %v", z)
	}
	z, err = UncoveredTokenRanges([]uint64{5, 6}, 2, 16, 40, nil)
	must(t, err)
	if !reflect.DeepEqual(z, []ZeroRange{{5, 8, 16}, {6, 0, 16}}) {
		t.Fatalf("uncovered %v", z)
	}
	_, err = UncoveredTokenRanges([]uint64{5}, 2, 0, 32, nil)
	wantErr(t, err, ErrInvalidArgument)
}

func TestGroupTrim(t *testing.T) {
	remote := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	tr, err := NewGroupTrim(GroupTrimInput{Kind: GroupAttention, LocalBlocks: []uint64{6, 7, 8, 9}, RemoteBlocks: remote,
		LocalTokensPerBlock: Ptr[uint64](16), RemoteTokensPerBlock: Ptr[uint64](16), RemoteComputedTokens: 160, LocalHitTokens: 96})
	must(t, err)
	defer tr.Close()
	runs, err := tr.Runs()
	must(t, err)
	if len(runs) != 4 || runs[0] != (TokenRun{6, 0, 6, 0, 16}) || runs[3] != (TokenRun{9, 0, 9, 0, 16}) {
		t.Fatalf("runs %v", runs)
	}
	kind, tokens, err := tr.Summary()
	must(t, err)
	if kind != GroupAttention || tokens != 64 {
		t.Fatalf("summary %v %d", kind, tokens)
	}
	for _, f := range []func() (int, error){
		func() (int, error) { z, err := tr.ZeroRanges(); return len(z), err },
		func() (int, error) { s, err := tr.States(); return len(s), err },
		func() (int, error) { u, err := tr.UnfilledStates(); return len(u), err },
	} {
		n, err := f()
		must(t, err)
		if n != 0 {
			t.Fatalf("expected nothing, got %d", n)
		}
	}

	tail, err := NewGroupTrim(GroupTrimInput{Kind: GroupAttention, LocalBlocks: []uint64{3, 4}, RemoteBlocks: []uint64{8, 9},
		LocalTokensPerBlock: Ptr[uint64](32), RemoteTokensPerBlock: Ptr[uint64](32), RemoteComputedTokens: 40})
	must(t, err)
	defer tail.Close()
	z, err := tail.ZeroRanges()
	must(t, err)
	if !reflect.DeepEqual(z, []ZeroRange{{4, 8, 32}}) {
		t.Fatalf("tail zero %v", z)
	}

	m, err := NewGroupTrim(GroupTrimInput{Kind: GroupMamba, CacheMode: MambaCacheAlign, LocalBlocks: []uint64{42}, RemoteBlocks: []uint64{0, 0, 43},
		LocalTokensPerBlock: Ptr[uint64](160), RemoteTokensPerBlock: Ptr[uint64](160), RemoteComputedTokens: 160, LocalHitTokens: 159})
	must(t, err)
	defer m.Close()
	states, err := m.States()
	must(t, err)
	if !reflect.DeepEqual(states, []StatePair{{42, 43, 160}}) {
		t.Fatalf("states %v", states)
	}

	_, err = NewGroupTrim(GroupTrimInput{Kind: GroupAttention, LocalBlocks: []uint64{10}, RemoteBlocks: []uint64{20, 21, 22},
		LocalTokensPerBlock: Ptr[uint64](16), RemoteTokensPerBlock: Ptr[uint64](16), RemoteComputedTokens: 48})
	wantErr(t, err, ErrCoverage, "token")
	_, err = NewGroupTrim(GroupTrimInput{Kind: GroupKind(3), LocalBlocks: []uint64{10}, RemoteBlocks: []uint64{20},
		LocalTokensPerBlock: Ptr[uint64](16), RemoteTokensPerBlock: Ptr[uint64](16), RemoteComputedTokens: 16})
	wantErr(t, err, ErrInvalidArgument, "3")

	must(t, m.Close())
	must(t, m.Close())
	_, _, err = m.Summary()
	wantErr(t, err, ErrClosed)
	_, err = m.Runs()
	wantErr(t, err, ErrClosed)
	_, err = m.States()
	wantErr(t, err, ErrClosed)
	_, err = m.ZeroRanges()
	wantErr(t, err, ErrClosed)
	_, err = m.UnfilledStates()
	wantErr(t, err, ErrClosed)
}

func TestScheduler(t *testing.T) {
	v := AlignedSplitV0604Input{NumExternalComputedTokens: 40, NumPromptTokens: 100, NumTokens: 100, BlockSize: 16, NumNewTokens: 50}
	n, err := MambaAlignedSplitV0604(v)
	must(t, err)
	if n != 48 {
		t.Fatalf("v0604 split %d", n)
	}
	v.UseEagle = true
	if n, _ = MambaAlignedSplitV0604(v); n != 40 {
		t.Fatalf("v0604 eagle split %d", n)
	}
	v.BlockSize = 0
	_, err = MambaAlignedSplitV0604(v)
	wantErr(t, err, ErrInvalidArgument)

	a := AlignedSplitInput{NumPromptTokens: 100, NumTokens: 100, BlockSize: 32, SharedPrefixTokens: 48, NumNewTokens: 100}
	if n, err = MambaAlignedSplit(a); err != nil || n != 32 {
		t.Fatalf("split %d %v", n, err)
	}
	a = AlignedSplitInput{NumPromptTokens: 1300, NumTokens: 1300, BlockSize: 512, LongPrefillTokenThreshold: Ptr[uint64](400), NumNewTokens: 400}
	// The block (512) is wider than every chunk (400): vLLM main keeps the chunk unfloored.
	if n, err = MambaAlignedSplit(a); err != nil || n != 400 {
		t.Fatalf("oversized-block split %d %v, want 400", n, err)
	}
	a.DeferOversizedBlock = true
	if n, err = MambaAlignedSplit(a); err != nil || n != 0 {
		t.Fatalf("deferred split %d %v, want 0", n, err)
	}
	a.BlockSize = 0
	_, err = MambaAlignedSplit(a)
	wantErr(t, err, ErrInvalidArgument)

	if n, err = DNumNewMatchedTokens(100, 32, true); err != nil || n != 67 {
		t.Fatalf("N-1 %d %v", n, err)
	}
	r, err := TruncateForRemoteDecode(RemoteDecodePrefill{NumPromptTokens: 100, MaxTokens: 50}, true)
	must(t, err)
	if r != (RemoteDecodePrefill{99, 1, true}) {
		t.Fatalf("truncate %+v", r)
	}
	if r2, err := TruncateForRemoteDecode(r, true); err != nil || r2 != r {
		t.Fatalf("truncation not idempotent: %+v %v", r2, err)
	}
	p, err := PlanRemoteDecodePrefill(33, 32, 16, true)
	must(t, err)
	if p != (RemoteDecodePrefillPlan{32, 16, 16}) {
		t.Fatalf("prefill plan %+v", p)
	}
	_, err = PlanRemoteDecodePrefill(33, 32, 0, true)
	wantErr(t, err, ErrInvalidArgument)

	g, err := DeriveOffloadGeometry(1000, 2096, 16, []OffloadLayer{{4096000, 4096}, {8192000, 8192}})
	must(t, err)
	if g != (OffloadGeometry{1000, 131}) {
		t.Fatalf("offload %+v", g)
	}
	_, err = DeriveOffloadGeometry(1000, 2096, 64, nil)
	wantErr(t, err, ErrInvalidArgument, "2096", "64")
	_, err = DeriveOffloadGeometry(1000, 2096, 16, []OffloadLayer{{4096, 4096}})
	wantErr(t, err, ErrOutOfBounds)
}
