// CUDA device memory on the tcp data connection (device/device_memory.hpp says why it is staged).
// An outgoing frame's device bytes are copied to a host buffer the frame owns when it is queued;
// an incoming payload aimed at device memory is received into the connection's host buffer and
// copied to the device once the frame is complete, so bytes that fail a sealed record's tag never
// reach the device. Host-only frames pass through untouched (no copy, no allocation).
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

// Copies the frame's staged bytes (d.rx_device) to the device and forgets them. Throws
// core::Error (Transport, cause CUDA) when a copy fails; they are forgotten either way.
void land_incoming(TcpData& d);

}  // namespace pdkv::exec
