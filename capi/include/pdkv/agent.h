/*
 * pdkv/agent.h - the transfer executor: one agent per engine rank moves the bytes a compiled
 * pdkv_transfer_plan_t names, with Linux cross-memory attach on one host (process_vm_readv /
 * process_vm_writev) and pdkv's own TCP data connection across hosts, with pdkv's own authenticated control channel for handshakes, heartbeats and notifications.
 * Included by pdkv.h; do not include it on its own.
 *
 * Conventions beyond those at the top of pdkv.h:
 *  - Lifetimes. pdkv_agent_t, pdkv_memory_t, pdkv_peer_t and pdkv_transfer_t hold live
 *    resources. Their internals are reference counted: a handle may be freed in any order
 *    relative to the others (a transfer or peer handle stays valid after pdkv_agent_free; its
 *    calls then report PDKV_ERR_SHUTDOWN or its final state), and no free ever waits for the
 *    network. Each handle must be freed exactly once; freeing a handle while another thread is
 *    inside a call on that same handle is undefined (the one rule a binding must enforce).
 *  - Threads. Every function of this header may be called from any thread, concurrently with any
 *    other function on the same agent, unless its comment says otherwise. Posting transfers from
 *    several threads at once is safe.
 *  - Deadlines are relative times in milliseconds. 0 means "the agent's default" where stated.
 */
#ifndef PDKV_AGENT_H
#define PDKV_AGENT_H

#ifndef PDKV_H
#error "include pdkv.h, not pdkv/agent.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Handles and enums -------------------------------------------------------------- */

/* One engine rank's executor: control listener, peers and their data paths, memory
 * registrations (UCX registers the memory and packs the region keys the handshake advertises; no
 * byte moves through UCX). */
typedef struct pdkv_agent pdkv_agent_t;
/* A registration of one metadata region's memory with an agent. */
typedef struct pdkv_memory pdkv_memory_t;
/* A connected (or formerly connected) remote engine rank. */
typedef struct pdkv_peer pdkv_peer_t;
/* One posted transfer (a plan being executed). */
typedef struct pdkv_transfer pdkv_transfer_t;
/* A batch of notifications taken from an agent. Immutable. */
typedef struct pdkv_notification_list pdkv_notification_list_t;

/* How an agent moves a peer's bytes. Numeric values are stable. */
typedef enum pdkv_transport {
  /* As SHM for a peer on the same host when both sides can attach to each other, as TCP
   * otherwise (another host, a TCP peer, or cross-memory attach not permitted). */
  PDKV_TRANSPORT_AUTO = 0,
  /* Cross-memory attach, one host only: the posting agent copies between the two processes'
   * registered memory itself (process_vm_readv for a READ, process_vm_writev for a WRITE), in
   * bounded batches driven by progress; no transport library is involved. At connect each side
   * proves it can reach the other (it reads back a random value the peer advertises at an
   * address in its memory); where it cannot (another pid namespace, a ptrace policy or seccomp
   * profile that forbids it, another host, a TCP peer) the connect fails with TRANSPORT naming
   * the peer and why. A dead peer is an error from its next copy (PEER_LOST) or from pdkv's
   * heartbeats on the control channel. */
  PDKV_TRANSPORT_SHM = 1,
  /* pdkv's TCP data connection (one per peer pair, admitted with a one-time token sent over the
   * control channel; the serving side checks every requested range against its registrations;
   * with a pre-shared key every frame is sealed with AES-256-GCM unless seal_data turned it off,
   * see pdkv_agent_options_t): works across hosts. A dead peer is a socket error (PEER_LOST). */
  PDKV_TRANSPORT_TCP = 2
} pdkv_transport_t;

/* Who drives the agent's data path (TCP data connections, cross-memory-attach batches) and its
 * deadlines. Numeric values are stable. */
typedef enum pdkv_progress_mode {
  PDKV_PROGRESS_THREAD = 0, /* a background thread of the agent (default) */
  PDKV_PROGRESS_CALLER = 1  /* the caller calls pdkv_agent_progress (e.g. from its event loop) */
} pdkv_progress_mode_t;

/* Where registered memory lives. Numeric values are stable. */
typedef enum pdkv_memory_type {
  PDKV_MEMORY_HOST = 0,
  /* GPU device memory (since 2.5; refused before). Its bytes are staged through host memory and
   * move over the TCP data connection only (see pdkv_agent_register_memory). */
  PDKV_MEMORY_CUDA = 1
} pdkv_memory_type_t;

/* Direction of a transfer. Numeric values are stable. */
typedef enum pdkv_transfer_op {
  /* Posted by the D rank the plan was compiled for: D pulls from the P ranks. */
  PDKV_TRANSFER_READ = 0,
  /* Posted by a P rank with the same plan: it pushes its own reads into the D rank. */
  PDKV_TRANSFER_WRITE = 1
} pdkv_transfer_op_t;

/* State of a transfer. Numeric values are stable. */
typedef enum pdkv_transfer_state {
  PDKV_TRANSFER_IN_FLIGHT = 0,
  PDKV_TRANSFER_DONE = 1,   /* every byte is in place (remotely complete for WRITE) */
  PDKV_TRANSFER_FAILED = 2  /* see the status and pdkv_transfer_failed_reads */
} pdkv_transfer_state_t;

/* Kinds of notification. Numeric values are stable. */
typedef enum pdkv_notification_kind {
  PDKV_NOTIFY_READ_DONE = 0,        /* (on P) a D rank finished reading a request from this rank */
  PDKV_NOTIFY_WRITE_DONE = 1,       /* (on D) a P rank finished writing a request into this rank */
  PDKV_NOTIFY_REQUEST_COMPLETE = 2, /* a leased request received its expected count */
  PDKV_NOTIFY_LEASE_EXPIRED = 3,    /* a lease's time ran out before its count was reached */
  PDKV_NOTIFY_PEER_CONNECTED = 4,   /* a peer completed the handshake (either direction) */
  PDKV_NOTIFY_PEER_LOST = 5         /* a peer died, closed, failed heartbeats or misbehaved */
} pdkv_notification_kind_t;

/* ---- Agent -------------------------------------------------------------------------- */

#define PDKV_AGENT_FIELD_LISTEN_ADDRESS (1ULL << 0)
#define PDKV_AGENT_FIELD_TRANSPORT (1ULL << 1)
#define PDKV_AGENT_FIELD_PROGRESS_MODE (1ULL << 2)
#define PDKV_AGENT_FIELD_DEFAULT_TIMEOUT (1ULL << 3)
#define PDKV_AGENT_FIELD_PRESHARED_KEY (1ULL << 4)
#define PDKV_AGENT_FIELD_HEARTBEAT (1ULL << 5)
#define PDKV_AGENT_FIELD_MAX_OUTSTANDING (1ULL << 6)
#define PDKV_AGENT_FIELD_COPY_THREADS (1ULL << 7)
/* Since 2.3. */
#define PDKV_AGENT_FIELD_SEAL_DATA (1ULL << 8)
/* Since 2.7. */
#define PDKV_AGENT_FIELD_MIN_PEER_PROTOCOL_MINOR (1ULL << 9)

/* The control protocol this build speaks to its peers: major 3, this minor (since 2.7; pdkv 2.7
 * speaks 3.5). Peers of the same major admit each other; what a newer minor adds is used only
 * with peers that say it in their Hello. */
#define PDKV_CONTROL_PROTOCOL_MAJOR 3
#define PDKV_CONTROL_PROTOCOL_MINOR 5

/* Options of pdkv_agent_new. Zero it, set struct_size, set the fields you want with their bits. */
typedef struct pdkv_agent_options {
  size_t struct_size;                     /* sizeof(pdkv_agent_options_t) */
  uint64_t field_mask;                    /* PDKV_AGENT_FIELD_* bits of the fields set below */
  const pdkv_engine_metadata_t *metadata; /* required: this rank's metadata (copied) */
  const char *listen_address;             /* "host:port"; port 0 picks a free port.
                                             Default "127.0.0.1:0" */
  int32_t transport;                      /* a pdkv_transport_t. Default AUTO */
  int32_t progress_mode;                  /* a pdkv_progress_mode_t. Default THREAD */
  uint64_t default_timeout_ms;            /* deadline of transfers and connects posted with 0.
                                             Default 30000; must be > 0 */
  const uint8_t *preshared_key;           /* both sides must hold the same key (>= 16 bytes,
                                             copied); NULL with length 0: no key. Default none.
                                             With a key, every control frame after the proofs
                                             (addresses, region keys, notifications) is sealed
                                             with AES-256-GCM under per-connection keys, and so
                                             is the TCP data connection (see seal_data); without
                                             one both are plaintext and only for trusted
                                             networks */
  size_t preshared_key_len;
  uint32_t heartbeat_interval_ms;         /* Ping period per peer. Default 500 */
  uint32_t heartbeat_timeout_ms;          /* a peer silent this long is lost, and so is a
                                             tcp peer whose data connection has work pending
                                             (batches unanswered, bytes to send) and moves no
                                             byte this long (a caller-progress agent must call
                                             progress at least this often while a transfer
                                             moves). Default 5000; must exceed the interval */
  uint32_t max_outstanding;               /* the most operations (plan reads; a read longer
                                             than a batch counts once per batch it spans) in
                                             flight per peer, across all transfers with that
                                             peer (they take turns, so a large transfer does not
                                             hold back one posted after it): over TCP in
                                             unanswered batches (at most 4 per transfer, of at
                                             most 4 MiB, each a quarter of this), over SHM in the
                                             batches being copied (one per transfer at a time, at
                                             most 512 pieces and 4 MiB, or 8 MiB per copy
                                             thread). Default 64; must be >= 1 */
  uint32_t copy_threads;                  /* since 2.1: threads that copy one SHM batch (cross-
                                             memory attach) of at least 1 MiB, each taking an
                                             equal part; the caller's thread is one of them.
                                             Default: 2 where the machine has at least 4
                                             hardware threads, else 1 (pdkv_agent_info_t says
                                             which). 1 to 16. With 2 on a 2-vCPU VM the copy
                                             moved ~1.6x the bytes per second of 1
                                             (docs/benchmarks.md) */
  uint8_t seal_data;                      /* since 2.3, at offset 80 (the 2.0 size; a caller
                                             setting its bit needs a struct_size that holds it,
                                             STRUCT_SIZE otherwise). With a preshared_key: 1
                                             seals every frame of the TCP data connections
                                             (headers and KV bytes) with AES-256-GCM under
                                             per-connection keys derived from the key, so a
                                             frame altered, replayed, reordered or injected on
                                             the path fails the transfer with PROTOCOL; 0 sends
                                             them in clear, for trusted fabrics only (the control
                                             channel stays sealed). Default 1 with a key, 0
                                             without one; 1 without a key, or a value other than
                                             0 and 1, is INVALID_ARGUMENT. Both agents of a pair
                                             must agree: a peer with the other setting is refused
                                             at connect (AUTH naming both engines and settings).
                                             SHM peers never use the data connection */
  uint16_t min_peer_protocol_minor;       /* since 2.7: the oldest control protocol minor (of
                                             major 3) a peer may run: an older one is refused
                                             at connect, both sides told (INCOMPATIBLE naming
                                             both versions). Default 0 (any). 5 (pdkv 2.7)
                                             guarantees that every transfer asks the other side
                                             about its lease (pdkv_agent_post) and that no
                                             Hello rewritten down on the path passes; at most
                                             this build's minor (PDKV_CONTROL_PROTOCOL_MINOR),
                                             INVALID_ARGUMENT above it */
} pdkv_agent_options_t;

/* Creates an agent: a UCX context for memory registration, the control listener (bound
 * before return), and the progress thread in THREAD mode. Errors: NULL_POINTER (options,
 * metadata, out), STRUCT_SIZE, INVALID_ARGUMENT (unknown field_mask bits, enum values, bad
 * address, key shorter than 16 bytes, timeouts 0 or heartbeat timeout <= interval, seal_data
 * other than 0 or 1 or 1 without a key, min_peer_protocol_minor above this build's, naming the
 * field and value), IO (the address cannot be bound: names it and errno), TRANSPORT (UCX failed:
 * pdkv_error_cause gives the ucs_status_t). *out owned by the caller (pdkv_agent_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_new(const pdkv_agent_options_t *options, pdkv_agent_t **out,
                                      pdkv_error_t **err);

/* Shuts the agent down: transfers still in flight fail with SHUTDOWN, peers are told Bye and
 * closed, threads are joined, registrations released once no operation can touch them.
 * Registrations not yet freed are released with the agent. Handles of memory, peers and
 * transfers stay valid until freed. NULL is allowed. Must not be called from a thread inside a
 * call on this agent; otherwise thread-safe. */
PDKV_API void pdkv_agent_free(pdkv_agent_t *agent);

/* Scalars of an agent (output struct: set struct_size, the library fills that prefix). */
typedef struct pdkv_agent_info {
  size_t struct_size;         /* sizeof(pdkv_agent_info_t) */
  const char *engine_id;      /* owned by the agent, valid until pdkv_agent_free */
  uint32_t tp_rank;
  uint32_t tp_size;
  const char *listen_address; /* "host:port" with the port actually bound; owned by the agent */
  uint16_t port;
  int32_t transport;          /* a pdkv_transport_t */
  int32_t progress_mode;      /* a pdkv_progress_mode_t */
  size_t num_peers;           /* peers currently connected */
  size_t transfers_in_flight;
  uint32_t copy_threads;      /* since 2.1: threads copying each SHM batch (the option or its
                                 default) */
} pdkv_agent_info_t;

/* Fills the caller's prefix of *out. Errors: NULL_POINTER, STRUCT_SIZE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_get_info(const pdkv_agent_t *agent, pdkv_agent_info_t *out,
                                           pdkv_error_t **err);

/* Drives progress once: TCP data connections (at most 16 MiB per peer and direction), one batch
 * of cross-memory-attach copies per transfer and peer (at most 4 MiB, or 8 MiB per copy thread, copied without the
 * agent's lock), deadlines and retries, without waiting for the network; *events (may be NULL)
 * receives the number of completions handled. Needed in CALLER mode: call it whenever the event
 * fd is readable (that is enough: the fd stays readable while a call has work, and deadlines are
 * kept by the agent's own control thread); harmless in THREAD mode. Errors: NULL_POINTER,
 * SHUTDOWN, TRANSPORT. Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_progress(pdkv_agent_t *agent, uint32_t *events,
                                           pdkv_error_t **err);

/* A file descriptor that is readable while notifications wait to be polled and, in CALLER mode,
 * while pdkv_agent_progress has work (a new transfer's first batches, data or answers on a TCP
 * data connection, cross-memory-attach batches to copy); quiet otherwise, so an event loop that
 * waits on it sleeps when the agent is idle. Level-triggered; owned by the agent, never close it.
 * Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_event_fd(const pdkv_agent_t *agent, int *fd,
                                           pdkv_error_t **err);

/* ---- Memory ------------------------------------------------------------------------- */

#define PDKV_MEMORY_FIELD_MEMORY_TYPE (1ULL << 0)
#define PDKV_MEMORY_FIELD_DEVICE (1ULL << 1)

/* One region's memory to register. */
typedef struct pdkv_memory_desc {
  size_t struct_size;   /* sizeof(pdkv_memory_desc_t) */
  uint64_t field_mask;  /* PDKV_MEMORY_FIELD_* bits */
  uint32_t region;      /* index of the region in the agent's metadata */
  uint64_t address;     /* must equal the region's advertised base */
  uint64_t length;      /* must equal the region's block_len * num_blocks */
  int32_t memory_type;  /* a pdkv_memory_type_t. Default HOST */
  int32_t device;       /* CUDA device ordinal (CUDA only). Default 0 */
} pdkv_memory_desc_t;

/* Registers a region's memory so peers can reach it and local transfers may use it. Register
 * every region before connecting: a peer receives the keys of the regions registered when its
 * handshake runs.
 * CUDA memory (memory_type CUDA, device its ordinal): every byte of the range must be device
 * memory of that device (one cudaMalloc'd allocation or several mapped back to back), as the CUDA
 * driver (libcuda.so.1, loaded at run time: the library needs no CUDA otherwise) reports. Its
 * bytes are copied through host memory on a stream of the device's primary context that does not
 * wait for the engine's work: the engine must have finished writing a block before P serves it,
 * and reads a received block only after the transfer is DONE. They move over the TCP data
 * connection only: an agent that holds a CUDA region, or whose peer does, uses TCP with a
 * same-host peer too (AUTO chooses it; SHM is refused naming the region), and permute_on_receive
 * plans are refused for CUDA regions (the permutation runs on the CPU).
 * Errors: NULL_POINTER, STRUCT_SIZE, INVALID_ARGUMENT (unknown bits, region index out of range,
 * the range not equal to the advertised one (names both ranges), DEVICE set for host memory, CUDA
 * memory where no CUDA driver or device is usable (says why), a CUDA range holding an address that
 * is not device memory of that device (names it)), BUSY (the region is already registered),
 * SHUTDOWN, TRANSPORT (the driver failed; cause CUDA). *out owned by the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_register_memory(pdkv_agent_t *agent,
                                                  const pdkv_memory_desc_t *desc,
                                                  pdkv_memory_t **out, pdkv_error_t **err);

/* Deregisters now. Errors: NULL_POINTER, BUSY (a transfer in flight uses the region, or, over
 * TCP, a batch of a failed transfer is still being received or sent: names the region and how many transfers),
 * and the
 * registration stays. Calling it twice is OK. Peers connected earlier keep a stale key: pdkv
 * refuses their later transfers that name the region only on this side's checks, so deregister
 * when no peer will read the region again. Thread-safe. */
PDKV_API pdkv_status_t pdkv_memory_deregister(pdkv_memory_t *memory, pdkv_error_t **err);

/* Frees the handle. A registration still in use is released when its last operation ends; until
 * then it serves no new transfer or peer request, but what it already holds (a transfer of this
 * agent, or a peer's batch being sent or received, which the peer can drag out) still reads or
 * writes its memory: before unmapping the memory, deregister (OK, not BUSY) or free the agent.
 * NULL is allowed. Not thread-safe with concurrent use of the same handle. */
PDKV_API void pdkv_memory_free(pdkv_memory_t *memory);

/* ---- Shared host memory (the mapped same-host data path) ----------------------------- */

/* Host memory that pdkv allocates so that same-host peers can map it: an anonymous file in
 * memory (memfd), sealed against shrinking and growing, mapped shared. A region registered
 * inside it (pdkv_agent_register_memory) is mapped by every same-host SHM peer at connect (it
 * takes the file out of this process with pidfd_getfd, which needs the same permission as cross-
 * memory attach, on Linux >= 5.6) and its bytes are then copied with memcpy rather than with
 * process_vm_readv / process_vm_writev; anywhere that fails the peer uses cross-memory attach
 * (pdkv_peer_info_t.mapped_regions says which). Build the engine's KV cache inside it. */
typedef struct pdkv_shared_memory pdkv_shared_memory_t;

/* Allocates `bytes` of zeroed, page-aligned host memory that same-host peers can map (whole
 * pages; the size is rounded up to the page size). Errors: NULL_POINTER (out), INVALID_ARGUMENT
 * (bytes 0 or above 2^47: names the value), IO (memfd_create, ftruncate, the seals or mmap
 * failed: names the call and errno; pdkv_error_cause gives errno). *out owned by the caller
 * (pdkv_shared_memory_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_shared_memory_alloc(size_t bytes, pdkv_shared_memory_t **out,
                                                pdkv_error_t **err);

/* The memory's first byte and the size asked for. *address stays valid until
 * pdkv_shared_memory_free. Errors: NULL_POINTER (memory, address, bytes). Thread-safe. */
PDKV_API pdkv_status_t pdkv_shared_memory_address(const pdkv_shared_memory_t *memory,
                                                  void **address, size_t *bytes,
                                                  pdkv_error_t **err);

/* Unmaps the memory in this process. Deregister every registration inside it first (or free the
 * agents they belong to), as for any registered memory: a registration handle freed while in use
 * may still touch the memory (pdkv_memory_free). Peers that mapped it keep their mappings of its pages until they
 * disconnect; they never touch this process's address space through them. NULL is allowed. Not
 * thread-safe with concurrent use of the same handle. */
PDKV_API void pdkv_shared_memory_free(pdkv_shared_memory_t *memory);

/* ---- Peers -------------------------------------------------------------------------- */

#define PDKV_CONNECT_FIELD_TIMEOUT (1ULL << 0)

/* Options of pdkv_agent_connect. */
typedef struct pdkv_connect_options {
  size_t struct_size;    /* sizeof(pdkv_connect_options_t) */
  uint64_t field_mask;   /* PDKV_CONNECT_FIELD_* bits */
  const char *address;   /* required: the peer agent's "host:port" */
  uint64_t timeout_ms;   /* deadline of the name lookup, connect and handshake.
                            Default: agent default */
} pdkv_connect_options_t;

/* Connects to a peer agent and runs the handshake (blocking until done or the deadline; the
 * deadline also bounds the lookup of a host name, a numeric address needs none): versions,
 * pre-shared key proof, then metadata and region keys (sealed when a key is set),
 * and the pair's
 * validation on both sides, then the choice of the data path (PDKV_TRANSPORT_*). Either engine
 * may dial the other: the pair is admitted when it can be served with either one as the reading
 * (decode) side, and a direction it cannot serve is refused when D compiles a plan for it. Connecting to an (engine, rank) already connected replaces the old
 * connection. Errors: NULL_POINTER, STRUCT_SIZE, INVALID_ARGUMENT (bad address), PEER_LOST
 * (refused or closed), TIMED_OUT, AUTH (key mismatch: names the peer; or the two agents'
 * seal_data differ: names both engines and settings), PROTOCOL (malformed or
 * lying frames, e.g. keys for regions it does not advertise), INCOMPATIBLE (the pair fails
 * validation: every item), SHUTDOWN, TRANSPORT (UCX failed, or the transports cannot serve the
 * pair: SHM needs cross-memory attach both ways, see PDKV_TRANSPORT_SHM). *out owned by the
 * caller (pdkv_peer_free).
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_connect(pdkv_agent_t *agent,
                                          const pdkv_connect_options_t *options,
                                          pdkv_peer_t **out, pdkv_error_t **err);

/* The connected peer (engine_id, tp_rank), whichever side connected. An agent may hold several
 * pipeline stages of one peer engine (peers are known by engine, stage and TP rank): when more
 * than one stage is connected at tp_rank this refuses to pick one (use
 * pdkv_agent_find_stage_peer). Errors: NULL_POINTER, NOT_FOUND (names the engine and rank),
 * INVALID_ARGUMENT (several stages at that rank: names them). *out owned by the caller.
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_find_peer(pdkv_agent_t *agent, const char *engine_id,
                                            uint32_t tp_rank, pdkv_peer_t **out,
                                            pdkv_error_t **err);

/* The connected peer (engine_id, pipeline stage pp_rank, tp_rank). Errors: NULL_POINTER,
 * NOT_FOUND (names the engine, stage and rank). *out owned by the caller. Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_find_stage_peer(pdkv_agent_t *agent, const char *engine_id,
                                                  uint32_t pp_rank, uint32_t tp_rank,
                                                  pdkv_peer_t **out, pdkv_error_t **err);

/* A peer's identity, state and counters (output struct). */
typedef struct pdkv_peer_info {
  size_t struct_size;           /* sizeof(pdkv_peer_info_t) */
  const char *engine_id;        /* owned by the peer handle, valid until pdkv_peer_free */
  uint32_t tp_rank;
  uint32_t pp_rank;             /* the peer's pipeline stage (0 without pipeline parallelism) */
  const char *address;          /* the control connection's remote "ip:port"; owned likewise */
  uint8_t connected;            /* 0 once lost or disconnected */
  uint8_t inbound;              /* 1: the peer connected to us */
  int32_t transport;            /* PDKV_TRANSPORT_SHM or _TCP, as chosen for this peer */
  int32_t lost_status;          /* why it was lost (a pdkv_status_t), PDKV_OK while connected */
  uint64_t bytes_read;          /* by READ transfers from this peer */
  uint64_t bytes_written;       /* by WRITE transfers into this peer */
  uint64_t transfers_done;
  uint64_t transfers_failed;
  uint64_t operations_failed;   /* operations with this peer that failed (a copy or batch), and
                                   its READ batches this side refused to serve */
  uint64_t notifications_sent;
  uint64_t notifications_received;
  uint64_t heartbeat_rtt_us;    /* last heartbeat round trip */
  uint32_t mapped_regions;      /* since 2.2: the peer's regions this side mapped at connect
                                   (SHM peers whose regions lie in pdkv_shared_memory_t): their
                                   bytes move with memcpy; the others with cross-memory attach */
  uint64_t bytes_mapped;        /* since 2.2: bytes of READs and WRITEs with this peer that were
                                   copied through those mappings */
  uint64_t lease_keeps_sent;    /* since 2.6: request ids this side asked the peer to keep
                                   leased (pdkv_agent_keep_leases; since 2.7 also those a
                                   transfer in flight asks for by itself, see pdkv_agent_post) */
  uint64_t lease_keeps_received; /* since 2.6: request ids the peer asked this side to keep
                                   leased (each applied to an open lease, if any) */
} pdkv_peer_info_t;

/* Fills the caller's prefix of *out. Errors: NULL_POINTER, STRUCT_SIZE. Thread-safe. */
PDKV_API pdkv_status_t pdkv_peer_get_info(const pdkv_peer_t *peer, pdkv_peer_info_t *out,
                                          pdkv_error_t **err);

/* A copy of the metadata the peer advertised. Errors: NULL_POINTER. *out owned by the caller
 * (pdkv_engine_metadata_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_peer_metadata(const pdkv_peer_t *peer, pdkv_engine_metadata_t **out,
                                          pdkv_error_t **err);

/* Closes the connection (Bye); transfers in flight with this peer fail with PEER_LOST. Calling
 * it on a lost peer is OK. Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_peer_disconnect(pdkv_peer_t *peer, pdkv_error_t **err);

/* Frees the handle (the connection stays). NULL is allowed. Not thread-safe with concurrent use
 * of the same handle. */
PDKV_API void pdkv_peer_free(pdkv_peer_t *peer);

/* ---- Transfers ---------------------------------------------------------------------- */

#define PDKV_TRANSFER_FIELD_TIMEOUT (1ULL << 0)
#define PDKV_TRANSFER_FIELD_NOTIFY (1ULL << 1)
#define PDKV_TRANSFER_FIELD_CONFIRM_LEASE (1ULL << 2)

/* What to execute. */
typedef struct pdkv_transfer_params {
  size_t struct_size;                /* sizeof(pdkv_transfer_params_t) */
  uint64_t field_mask;               /* PDKV_TRANSFER_FIELD_* bits */
  int32_t op;                        /* a pdkv_transfer_op_t */
  const pdkv_transfer_plan_t *plan;  /* required; read during the call only (copied) */
  const char *peer_engine_id;        /* required: READ: the P engine; WRITE: the D engine */
  const char *request_id;            /* required: non-empty, <= 1024 bytes; travels in
                                        notifications */
  uint64_t timeout_ms;               /* deadline. Default: the agent's */
  uint8_t notify;                    /* 1: notify the plan's peers after the data (default 1) */
  uint8_t confirm_lease;             /* since 2.7: 1 (default): the other side confirms its
                                        lease of request_id first (pdkv_agent_post); 0: a READ is
                                        done when its data lands, a WRITE starts at once, one
                                        control round trip sooner, for a caller keeping the other
                                        side's blocks by other means */
} pdkv_transfer_params_t;

/* Posts a transfer and returns at once. READ (on D rank plan.d_tp_rank): pulls every read of the
 * plan from the connected P ranks of peer_engine_id, then notifies each of the plan's notify
 * ranks (READ_DONE there) once its data is complete. WRITE (on P rank r): pushes the plan's reads
 * for P rank r into the D rank and, once every byte is in D's memory (copied, or acknowledged by D
 * over TCP), notifies D (WRITE_DONE). D's engine reads the written bytes only after it has polled
 * that WRITE_DONE: P's transfer completing orders nothing in D's process. Before any byte moves,
 * every local range is checked against this agent's registrations and every remote range against
 * the peer's advertised, registered regions: a violation is OUT_OF_BOUNDS naming the read, side,
 * region and range, and nothing is posted. At most max_outstanding operations are in flight per
 * peer, shared in turns with the other transfers on that peer (pdkv_agent_options_t).
 * Since 2.7 a transfer keeps the other side's leases of request_id open while it moves bytes (a
 * READ P's, a WRITE D's): it asks every rank it moves bytes with or will notify to keep them (as
 * pdkv_agent_keep_leases does) when posted and then with each heartbeat, until its bytes with that
 * rank are done or it stops (fails, is cancelled, times out), so the other side does not free
 * blocks a slow transfer still copies; a rank before control protocol 3.4 is not asked. A lease
 * shorter than the heartbeat interval can still expire between two asks.
 * Also since 2.7 (peer ranks at control protocol 3.5 or later), each rank is asked when the
 * transfer is posted whether its lease of request_id is open (or was never leased): blocks whose
 * lease had ended were given back and may hold another request's bytes. A READ counts a P rank's
 * bytes only once it answered (it reads meanwhile: the answer costs at most one control round
 * trip); a WRITE sends nothing to a D rank before its answer (one control round trip before the
 * data). An ended lease fails the transfer with TIMED_OUT (it expired) or INCOMPATIBLE (it
 * completed: every rank it expected notified), naming the rank and request, and lists every read
 * with that rank as failed (a WRITE wrote none of them). A peer whose control thread does not
 * answer (a stopped process) holds the transfer until its deadline.
 * params->confirm_lease 0 (PDKV_TRANSFER_FIELD_CONFIRM_LEASE) skips the question: a READ is done
 * when its data lands and a WRITE starts at once, as before 2.7 (docs/benchmarks.md measures
 * what the wait costs).
 * Errors: NULL_POINTER, STRUCT_SIZE, INVALID_ARGUMENT (unknown bits, op, empty or long request
 * id, a plan for another rank or TP size: names both), NOT_FOUND (a peer rank the plan needs is
 * not connected: names engine and rank), OUT_OF_BOUNDS, SHUTDOWN. *out owned by the caller
 * (pdkv_transfer_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_post(pdkv_agent_t *agent, const pdkv_transfer_params_t *params,
                                       pdkv_transfer_t **out, pdkv_error_t **err);

/* A transfer's progress (output struct). */
typedef struct pdkv_transfer_info {
  size_t struct_size;      /* sizeof(pdkv_transfer_info_t) */
  int32_t state;           /* a pdkv_transfer_state_t */
  int32_t status;          /* PDKV_OK, or why it failed (TIMED_OUT, CANCELLED, PEER_LOST, ...) */
  uint64_t bytes_total;
  uint64_t bytes_done;
  uint64_t operations_total;
  uint64_t operations_done;
  uint64_t reads_failed;   /* plan reads that did not complete */
  uint64_t elapsed_us;     /* from post to the final state (or now) */
} pdkv_transfer_info_t;

/* Fills the caller's prefix of *out (a poll: never blocks). Errors: NULL_POINTER, STRUCT_SIZE.
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_get_info(const pdkv_transfer_t *transfer,
                                              pdkv_transfer_info_t *out, pdkv_error_t **err);

/* Waits up to timeout_ms (0: do not wait; UINT64_MAX: until the final state, which the
 * transfer's own deadline bounds) for the final state. Returns PDKV_OK with *finished = 1 when
 * the transfer is DONE, its failure status (with the message naming the reads and peers) with
 * *finished = 1 when FAILED, and PDKV_OK with *finished = 0 when the wait timed out.
 * In CALLER mode the wait drives progress itself: it sleeps until pdkv_agent_progress has work
 * (what makes the event fd readable, notifications aside) or the transfer is final, and calls it
 * only then, so waiting on a peer that does not answer costs no CPU. Errors: NULL_POINTER, the
 * transfer's status. Thread-safe; several threads may wait on one transfer (the first CALLER-mode
 * wait on a transfer takes one descriptor, an eventfd, released with the transfer). */
PDKV_API pdkv_status_t pdkv_transfer_wait(pdkv_transfer_t *transfer, uint64_t timeout_ms,
                                          uint8_t *finished, pdkv_error_t **err);

/* Asks the transfer to stop: nothing more is posted, and it fails with CANCELLED once the
 * operations already in flight have completed (bounded by its deadline); a WRITE first waits for
 * D to acknowledge what it already sent, so no byte of it lands in D after D hears of the
 * failure. Its failed reads are those that did not land: none when every read had landed before
 * the cancel took effect. No effect on a transfer already finished. Never fails on a valid handle. Errors: NULL_POINTER.
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_cancel(pdkv_transfer_t *transfer, pdkv_error_t **err);

/* *fd: a descriptor that becomes readable when the transfer reaches its final state (DONE or
 * FAILED) and stays readable (readable at once when it already is), so an event loop (poll, epoll,
 * asyncio's add_reader) learns that a transfer ended without a thread blocked in
 * pdkv_transfer_wait. Poll it only: never read, write or close it. It belongs to the transfer and
 * is valid until pdkv_transfer_free (the first call takes one descriptor, an eventfd, which
 * CALLER-mode waits share). In CALLER mode the transfer moves only while someone calls
 * pdkv_agent_progress (the agent's event fd says when). Since 2.5. Errors: NULL_POINTER, TRANSPORT
 * (no descriptor could be had; cause errno). Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_done_fd(const pdkv_transfer_t *transfer, int *fd, pdkv_error_t **err);

/* One plan read that did not complete. Element layout fixed for the major version. */
typedef struct pdkv_failed_read {
  uint32_t p_tp_rank;     /* the P rank whose read list holds it */
  uint32_t reserved;
  uint64_t read_index; /* index in pdkv_transfer_plan_rank_reads(plan, p_tp_rank) */
  int32_t status;      /* a pdkv_status_t */
  uint32_t reserved2;
} pdkv_failed_read_t;

/* The reads that did not complete, by P rank then index (*count 0 while in flight or when
 * DONE); since 2.7 also the reads of a failed READ from a P rank that did not confirm its lease
 * of the request (see pdkv_agent_post): their bytes landed but are not known to be the request's. *reads owned by the transfer, valid until pdkv_transfer_free. Errors: NULL_POINTER.
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_transfer_failed_reads(const pdkv_transfer_t *transfer,
                                                  const pdkv_failed_read_t **reads, size_t *count,
                                                  pdkv_error_t **err);

/* Frees the handle at any state: an in-flight transfer is cancelled first and its resources are
 * released when its last operation ends (never a use after free). NULL is allowed. Not
 * thread-safe with concurrent use of the same handle. */
PDKV_API void pdkv_transfer_free(pdkv_transfer_t *transfer);

/* ---- Notifications and leases ------------------------------------------------------ */

/* Leases a request's blocks on this rank: after `expected` successful READ_DONE / WRITE_DONE
 * notifications for request_id from distinct ranks of one remote engine (a rank's second success
 * is not counted; neither are ranks of another engine towards this one's count, so a request id
 * re-routed to a second D engine never completes on a mix of both engines' ranks), a
 * REQUEST_COMPLETE notification follows; if ttl_ms passes first,
 * LEASE_EXPIRED does (free the blocks either way). A transfer of the request in flight from the
 * other side (a D READ, a P WRITE) keeps the lease open by itself, and one posted after the lease
 * ended fails instead of moving the freed blocks' bytes (pdkv_agent_post, since 2.7; the last
 * 65536 ended leases are remembered for that, an older one reads as never leased). On a P rank, `expected` is the number of D
 * ranks that read from or notify it per request: the plan's notifications_per_p_rank
 * (pdkv_transfer_plan_info_t), which P can also derive before any plan exists from its own TP
 * mapping (pdkv_tp_mapping_info_t.notifications_expected). A D rank that received WRITEs
 * expects one WRITE_DONE per P rank that posted one. Notifications that arrived before the lease
 * count. Leasing a request again replaces its lease. Errors: NULL_POINTER, INVALID_ARGUMENT
 * (empty or long request id, expected 0, ttl 0), SHUTDOWN. Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_lease(pdkv_agent_t *agent, const char *request_id,
                                        uint32_t expected, uint64_t ttl_ms, pdkv_error_t **err);

/* Keeps leases open on the other side (since 2.6): asks every connected rank of engine
 * peer_engine_id (all its pipeline stages) to keep its leases of the `count` requests in
 * request_ids open. Each such rank moves the deadline of each of those requests it leases
 * (pdkv_agent_lease on its side) to at least now + that lease's own ttl_ms; ids it does not lease
 * are ignored there, and no lease is opened or lengthened beyond its own ttl per keep. A reader
 * (D) calls this for requests it will read later (queued behind others), more often than P's ttl,
 * so P neither frees their blocks early nor has to lease them for long: vLLM's "HB:req1,req2"
 * notifications, except that an id may hold any bytes but NUL (a comma names one request here).
 * The frames are queued on the control channels and the call returns without waiting for the
 * peers; count 0 sends nothing. Errors: NULL_POINTER (agent, peer_engine_id, request_ids with
 * count > 0, an element), INVALID_ARGUMENT (an empty or long id, naming its index), NOT_FOUND (no
 * connected rank of that engine), INCOMPATIBLE (a connected rank of it runs control protocol
 * before 3.4, named; nothing is sent), SHUTDOWN. The strings are read during the call only.
 * Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_keep_leases(pdkv_agent_t *agent, const char *peer_engine_id,
                                              const char *const *request_ids, size_t count,
                                              pdkv_error_t **err);

/* One notification, an element of a pdkv_notification_list_t; its strings are owned by the
 * list. Element layout fixed for the major version (arrays of it cannot grow). */
typedef struct pdkv_notification {
  int32_t kind;            /* a pdkv_notification_kind_t */
  int32_t status;          /* PDKV_OK, or the failure a peer reported (READ/WRITE_DONE), or why
                              a peer was lost (PEER_LOST kind) */
  const char *request_id;  /* "" for peer notifications */
  const char *engine_id;   /* the remote engine ("" for lease notifications) */
  uint32_t tp_rank;        /* the remote rank */
  uint32_t count;          /* ranks of the sender's engine whose successful notification for
                              the request arrived so far (a rank's second success is delivered,
                              not counted, so a duplicate never completes a lease early); for
                              lease notifications the furthest engine's count */
  uint32_t expected;       /* the lease's expected count (0: no lease) */
  uint64_t bytes;          /* bytes the sender moved for this request */
  uint32_t pp_rank;        /* the remote rank's pipeline stage */
} pdkv_notification_t;

/* Takes every pending notification, oldest first (*out may hold 0 items). Poll regularly: a
 * peer's READ_DONE / WRITE_DONE that finds 65536 notifications (or 32 MiB of them) pending is not
 * queued; that peer is dropped instead (PEER_LOST notification with status PROTOCOL), so a peer
 * can neither grow the queue without bound nor push out what is queued. Errors: NULL_POINTER.
 * *out owned by the caller (pdkv_notification_list_free). Thread-safe. */
PDKV_API pdkv_status_t pdkv_agent_poll_notifications(pdkv_agent_t *agent,
                                                     pdkv_notification_list_t **out,
                                                     pdkv_error_t **err);

/* The notifications, oldest first: *items points to *count entries owned by the list, valid
 * (with every string they point to) until pdkv_notification_list_free (NULL when *count is 0).
 * Errors: NULL_POINTER. Thread-safe. */
PDKV_API pdkv_status_t pdkv_notification_list_items(const pdkv_notification_list_t *list,
                                                    const pdkv_notification_t **items,
                                                    size_t *count, pdkv_error_t **err);

/* Frees a list. NULL is allowed. Not thread-safe with concurrent use of the same list. */
PDKV_API void pdkv_notification_list_free(pdkv_notification_list_t *list);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PDKV_AGENT_H */
