// CUDA device memory on the tcp data connection (device/device_memory.hpp says why it is staged).
// An outgoing frame's device bytes are copied to a host buffer the frame owns when the progress
// call that sends it starts on it; an incoming payload aimed at device memory is received into the
// connection's host buffer and copied to the device once the frame is complete, so bytes that fail
// a sealed record's tag never reach the device. Both copies run in the progress call that owns the
// connection's I/O (TcpData::io) WITHOUT the agent's lock, like its system calls: a copy of a few
// MiB must not hold up every other call on the agent. The functions here touch only the frame,
// the connection's staging buffers and the device, which that owner alone uses meanwhile. Host-only
// frames pass through untouched (no copy, no allocation).
#pragma once

#include <span>
#include <vector>

#include "agent/agent_core.hpp"

namespace pdkv::exec {

// body[i] lies in the device memory of devices[i] (null: host memory). Copies those pieces into
// o.staged (a spare buffer of d's when one is large enough) and points their iovecs there. Throws
// core::Error (Transport, cause CUDA) when a copy fails; `o` is then unusable.
void stage_outgoing(TcpData& d, TcpOut& o, std::span<const Registration* const> devices);

// A frame left the queue: its staging buffer becomes a spare of d's (a few are kept), so a stream
// of frames reuses warm pages instead of faulting in fresh ones for every batch.
void recycle_staging(TcpData& d, TcpOut& o);

// to[i] is where piece i of the frame being received belongs, in the device memory of devices[i]
// (null: host). Points those iovecs into d.rx_staged and records in d.rx_device where each goes.
void stage_incoming(TcpData& d, std::vector<iovec>& to, std::span<const Registration* const> devices);

// Copies a complete frame's staged bytes (what stage_incoming listed in d.rx_device, taken out of
// it by the caller) to the device. Throws core::Error (Transport, cause CUDA) when a copy fails.
void land_incoming(std::span<const DeviceLanding> landing);

}  // namespace pdkv::exec
