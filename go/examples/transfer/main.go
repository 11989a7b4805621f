// Command transfer moves one request's KV cache from a P (prefill) rank to a D (decode) rank
// with the transfer executor and checks every byte (setup shared with every language:
// internal/xfer).
//
// Usage: go run ./examples/transfer [flags]
//
//	-role both         both ranks in this process (default)
//	-role p            a P rank alone: prints "LISTEN <host:port>", waits (leased) until a D
//	                   rank has read the request, exits 0
//	-role d -connect A a D rank alone: connects to A, reads, verifies byte by byte, prints
//	                   "VERIFIED <bytes>", exits 0
//	-transport auto|shm|tcp, -request ID (default req-1), -timeout D (default 20s)
//
// Any failure prints the error and exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	pdkv "github.com/pdkv/pdkv/go"
	"github.com/pdkv/pdkv/go/internal/xfer"
)

func main() {
	role := flag.String("role", "both", "both, p or d")
	connect := flag.String("connect", "", "P rank address (role d)")
	transport := flag.String("transport", "auto", "auto, shm or tcp")
	request := flag.String("request", "req-1", "request id")
	timeout := flag.Duration("timeout", 20*time.Second, "deadline of the whole run")
	flag.Parse()
	tr := map[string]pdkv.Transport{"auto": pdkv.TransportAuto, "shm": pdkv.TransportSHM, "tcp": pdkv.TransportTCP}
	t, ok := tr[*transport]
	if !ok {
		fmt.Fprintf(os.Stderr, "transfer: unknown transport %q\n", *transport)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	err := run(ctx, *role, *connect, t, *request, *timeout)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "transfer (%s): %v\n", *role, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, role, connect string, t pdkv.Transport, request string, timeout time.Duration) error {
	model, err := xfer.Model()
	if err != nil {
		return err
	}
	defer model.Close()
	node := func(prefill bool) (*xfer.Node, error) {
		return xfer.NewNode(model, prefill, xfer.Options{Transport: t})
	}
	switch role {
	case "p":
		p, err := node(true)
		if err != nil {
			return err
		}
		defer p.Close()
		if err := p.Agent.Lease(request, 1, timeout); err != nil {
			return err
		}
		addr, err := p.Address()
		if err != nil {
			return err
		}
		fmt.Printf("LISTEN %s\n", addr)
		if err := xfer.WaitComplete(ctx, p.Agent, request); err != nil {
			return err
		}
		fmt.Printf("P: request %s read by D\n", request)
	case "d":
		if connect == "" {
			return fmt.Errorf("-role d needs -connect")
		}
		d, err := node(false)
		if err != nil {
			return err
		}
		defer d.Close()
		peer, err := d.Agent.Connect(ctx, connect)
		if err != nil {
			return err
		}
		defer peer.Close()
		n, err := read(ctx, d, request)
		if err != nil {
			return err
		}
		fmt.Printf("VERIFIED %d\n", n)
	case "both":
		p, err := node(true)
		if err != nil {
			return err
		}
		defer p.Close()
		d, err := node(false)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := p.Agent.Lease(request, 1, timeout); err != nil {
			return err
		}
		addr, err := p.Address()
		if err != nil {
			return err
		}
		peer, err := d.Agent.Connect(ctx, addr)
		if err != nil {
			return err
		}
		defer peer.Close()
		info, err := peer.Info()
		if err != nil {
			return err
		}
		fmt.Printf("D connected to %s (transport %d)\n", info.Address, info.Transport)
		n, err := read(ctx, d, request)
		if err != nil {
			return err
		}
		if err := xfer.WaitComplete(ctx, p.Agent, request); err != nil {
			return err
		}
		fmt.Printf("VERIFIED %d; P saw the request complete\n", n)
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	return nil
}

// read compiles the plan from the peer's metadata, reads and verifies.
func read(ctx context.Context, d *xfer.Node, request string) (uint64, error) {
	// A D rank keeps P's lease of a request open until it reads it (a real engine does this
	// periodically for requests queued behind others, as vLLM's "HB:" notifications do).
	if err := d.Agent.KeepLeases(xfer.PEngine, []string{request}); err != nil {
		return 0, err
	}
	plan, err := xfer.PlanFromPeer(d)
	if err != nil {
		return 0, err
	}
	defer plan.Close()
	tr, err := d.Agent.Post(ctx, pdkv.TransferParams{Op: pdkv.TransferRead, Plan: plan, PeerEngineID: xfer.PEngine, RequestID: request})
	if err != nil {
		return 0, err
	}
	defer tr.Close()
	if err := tr.Wait(ctx); err != nil {
		return 0, err
	}
	info, err := tr.Info()
	if err != nil {
		return 0, err
	}
	fmt.Printf("D: read %d bytes in %d operations (%v)\n", info.BytesDone, info.OperationsDone, info.Elapsed)
	return xfer.Verify(plan, d.Buffers)
}
