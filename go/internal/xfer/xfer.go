// Package xfer is the setup every transfer example and test shares, in every language (Rust,
// Go, Python, C), so that a P rank driven from one language and a D rank from another agree on
// every byte (the Rust original: rust/pdkv/examples/xfer_setup/mod.rs):
//
//   - model "xfer-tiny": 2 KV heads of 16 (K and V), 2-byte dtype, 2 attention layers; TP 1;
//   - each rank: 2 regions of 8 blocks in page-aligned host memory whose addresses are the
//     metadata's region bases; engine ids "xfer-prefill" and "xfer-decode";
//   - P fills region r, byte o with Pattern(r, o); D fills its regions with 0xFF (never a
//     pattern value);
//   - the request: one attention group, D blocks [1, 4, 6] receive P blocks [2, 3, 7], P computed
//     3 full blocks of tokens;
//   - D verifies byte by byte: every byte a plan read names holds P's pattern at the read's
//     remote offset, every other byte is still 0xFF.
package xfer

import (
	"context"
	"fmt"
	"time"

	pdkv "github.com/pdkv/pdkv/go"
)

// Engine ids, region and block counts, D's fill byte and the request's blocks.
const (
	PEngine    = "xfer-prefill"
	DEngine    = "xfer-decode"
	NumRegions = 2
	NumBlocks  = 8
	DFill      = 0xFF
)

// PBlocks are the request's P blocks; DBlocks the D blocks that receive them.
var (
	PBlocks = []uint64{2, 3, 7}
	DBlocks = []uint64{1, 4, 6}
)

// Pattern is P's byte at offset of region: distinct for every 256-byte chunk of a region (up
// to 64 KiB), so a misplaced page or chunk is caught. Values are < 251.
func Pattern(region uint32, offset uint64) byte {
	return byte(((offset>>8)*131 + (offset&255)*7 + uint64(region)*29 + 1) % 251)
}

// Model returns the tiny pure-attention model.
func Model() (*pdkv.Model, error) {
	return pdkv.NewModel(pdkv.ModelDesc{
		Name: "xfer-tiny", NumKVHeads: 2, HeadSize: 16, HeadSizeV: 16, DtypeBytes: 2, LayerPattern: "**",
	})
}

func layout(engineID string, bases []uint64) pdkv.EngineLayout {
	l := pdkv.DefaultEngineLayout()
	l.EngineID = engineID
	l.NumRegions = NumRegions
	l.NumLogicalBlocks = NumBlocks
	l.RegionBases = bases
	return l
}

// Node is a running rank: its agent, its memory and registrations, and its metadata.
type Node struct {
	Agent    *pdkv.Agent
	Buffers  []*pdkv.HostBuffer
	Memory   []*pdkv.Memory
	Metadata *pdkv.EngineMetadata
}

// Close closes the agent, then the registrations, then frees the memory.
func (n *Node) Close() {
	_ = n.Agent.Close()
	for _, m := range n.Memory {
		_ = m.Close()
	}
	for _, b := range n.Buffers {
		_ = b.Free()
	}
	_ = n.Metadata.Close()
}

// Options tune NewNode beyond the shared setup.
type Options struct {
	Transport    pdkv.Transport
	ProgressMode pdkv.ProgressMode
	Key          []byte
	// Shared puts each region in a NewSharedHostBuffer (same-host peers map it).
	Shared   bool
	SealData *bool // pdkv.AgentOptions.SealData
	// MinPeerProtocolMinor is pdkv.AgentOptions.MinPeerProtocolMinor.
	MinPeerProtocolMinor uint16
}

// NewNode allocates a rank's regions (P: the pattern, D: 0xFF), builds its metadata at their
// addresses (the sizes come from a first metadata at the default base), creates its agent on
// 127.0.0.1 (free port) with short heartbeats and registers every region.
func NewNode(model *pdkv.Model, prefill bool, o Options) (*Node, error) {
	id := DEngine
	if prefill {
		id = PEngine
	}
	cfg := pdkv.DefaultEngineConfig()
	probe, err := pdkv.EngineMetadataFromModel(model, cfg, layout(id, nil))
	if err != nil {
		return nil, err
	}
	defer probe.Close()
	regions, err := probe.Regions()
	if err != nil {
		return nil, err
	}
	n := &Node{}
	var bases []uint64
	for r, reg := range regions {
		alloc := pdkv.NewHostBuffer
		if o.Shared {
			alloc = pdkv.NewSharedHostBuffer
		}
		b, err := alloc(int(reg.BlockLen * reg.NumBlocks))
		if err != nil {
			n.Close()
			return nil, err
		}
		mem := b.Bytes()
		for o := range mem {
			if prefill {
				mem[o] = Pattern(uint32(r), uint64(o))
			} else {
				mem[o] = DFill
			}
		}
		n.Buffers = append(n.Buffers, b)
		bases = append(bases, b.Addr())
	}
	if n.Metadata, err = pdkv.EngineMetadataFromModel(model, cfg, layout(id, bases)); err != nil {
		n.Close()
		return nil, err
	}
	n.Agent, err = pdkv.NewAgent(pdkv.AgentOptions{
		Metadata: n.Metadata, ListenAddress: "127.0.0.1:0", Transport: o.Transport,
		ProgressMode: o.ProgressMode, DefaultTimeout: 10 * time.Second, PresharedKey: o.Key, SealData: o.SealData,
		MinPeerProtocolMinor: o.MinPeerProtocolMinor,
		HeartbeatInterval:    100 * time.Millisecond, HeartbeatTimeout: 1500 * time.Millisecond,
	})
	if err != nil {
		n.Close()
		return nil, err
	}
	for r, b := range n.Buffers {
		m, err := n.Agent.RegisterBuffer(uint32(r), b)
		if err != nil {
			n.Close()
			return nil, err
		}
		n.Memory = append(n.Memory, m)
	}
	return n, nil
}

// Address returns the agent's "host:port".
func (n *Node) Address() (string, error) {
	i, err := n.Agent.Info()
	return i.ListenAddress, err
}

// Groups returns the request's groups for blocks of blockTokens tokens.
func Groups(blockTokens uint64) []pdkv.PlanGroup {
	return []pdkv.PlanGroup{{Trim: pdkv.GroupTrimInput{
		Kind: pdkv.GroupAttention, LocalBlocks: DBlocks, RemoteBlocks: PBlocks,
		RemoteComputedTokens: 3 * blockTokens,
	}}}
}

// Plan compiles the request's plan for D (d) reading from P (p); a P rank writing uses the
// same plan.
func Plan(d, p *pdkv.EngineMetadata) (*pdkv.TransferPlan, error) {
	ctx, err := pdkv.NewPlanContext(pdkv.PlanContextParams{Local: d, Remote: []*pdkv.EngineMetadata{p}})
	if err != nil {
		return nil, err
	}
	defer ctx.Close()
	info, err := d.Info()
	if err != nil {
		return nil, err
	}
	return ctx.Compile(Groups(uint64(info.LogicalBlockSize)))
}

// PlanFromPeer compiles the plan on the D node from the connected P rank's metadata.
func PlanFromPeer(d *Node) (*pdkv.TransferPlan, error) {
	peer, err := d.Agent.FindPeer(PEngine, 0)
	if err != nil {
		return nil, err
	}
	defer peer.Close()
	pm, err := peer.Metadata()
	if err != nil {
		return nil, err
	}
	defer pm.Close()
	return Plan(d.Metadata, pm)
}

// Verify checks D's memory byte by byte against the plan and returns the bytes the plan moved.
func Verify(plan *pdkv.TransferPlan, d []*pdkv.HostBuffer) (uint64, error) {
	want := make([][]byte, len(d))
	for r, b := range d {
		want[r] = make([]byte, b.Len())
		for i := range want[r] {
			want[r][i] = DFill
		}
	}
	reads, bytes, err := plan.RankReads(0)
	if err != nil {
		return 0, err
	}
	if len(reads) == 0 {
		return 0, fmt.Errorf("the plan has no reads")
	}
	for _, rd := range reads {
		for i := uint64(0); i < rd.Length; i++ {
			want[rd.LocalRegion][rd.LocalOffset+i] = Pattern(rd.RemoteRegion, rd.RemoteOffset+i)
		}
	}
	for r, b := range d {
		got := b.Bytes()
		for o := range got {
			if got[o] != want[r][o] {
				return 0, fmt.Errorf("D region %d byte %d: got %#02x, want %#02x", r, o, got[o], want[r][o])
			}
		}
	}
	return bytes, nil
}

// WaitComplete waits for the P side's lease of request to complete (NotifyRequestComplete) and
// fails on NotifyLeaseExpired.
func WaitComplete(ctx context.Context, p *pdkv.Agent, request string) error {
	n, err := p.WaitNotification(ctx, func(n pdkv.Notification) bool {
		return n.RequestID == request && (n.Kind == pdkv.NotifyRequestComplete || n.Kind == pdkv.NotifyLeaseExpired)
	})
	if err != nil {
		return fmt.Errorf("waiting for request %s: %w", request, err)
	}
	if n.Kind != pdkv.NotifyRequestComplete {
		return fmt.Errorf("request %s: lease expired after %d of %d notifications", request, n.Count, n.Expected)
	}
	return nil
}
