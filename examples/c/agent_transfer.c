/*
 * agent_transfer.c - moves one request's KV cache from a P (prefill) rank to a D (decode) rank
 * with the transfer executor of pdkv.h (pdkv/agent.h) and checks every byte.
 *
 * The setup is the one every language shares, so that a P rank driven from one language and a
 * D rank from another agree on every byte (the Rust original: rust/pdkv/examples/xfer_setup):
 * model "xfer-tiny" (2 KV heads of 16, K and V, 2-byte dtype, 2 attention layers), TP 1; each
 * rank has 2 regions of 8 blocks in page-aligned host memory (anonymous mmap) advertised as the
 * metadata's region bases; engine ids "xfer-prefill" and "xfer-decode"; P fills region r, byte o
 * with pattern(r, o), D fills with 0xFF; the request reads P blocks [2, 3, 7] into D blocks
 * [1, 4, 6] (3 full blocks of tokens); D checks every byte a plan read names against P's
 * pattern and every other byte against 0xFF.
 *
 * Usage: agent_transfer [--role both|p|d] [--connect HOST:PORT] [--transport auto|shm|tcp]
 *                       [--request ID] [--timeout-ms MS]
 *   --role both (default): both ranks in this process;
 *   --role p: a P rank alone: prints "LISTEN <host:port>", waits (leased) until a D rank has
 *             read the request, exits 0;
 *   --role d --connect A: a D rank alone: connects, reads, verifies, prints "VERIFIED <bytes>".
 * Any failure prints the error and exits 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <pdkv.h>

#define NUM_REGIONS 2u
#define NUM_BLOCKS 8u
#define D_FILL 0xFFu
static const char *const P_ENGINE = "xfer-prefill";
static const char *const D_ENGINE = "xfer-decode";
static const uint64_t P_BLOCKS[3] = {2, 3, 7};
static const uint64_t D_BLOCKS[3] = {1, 4, 6};

/* P's byte at offset of region: distinct for every 256-byte chunk of a region (up to 64 KiB). */
static uint8_t pattern(uint32_t region, uint64_t offset) {
  return (uint8_t)(((offset >> 8) * 131u + (offset & 255u) * 7u + (uint64_t)region * 29u + 1u) % 251u);
}

static int fail(pdkv_status_t st, pdkv_error_t *err, const char *what) {
  fprintf(stderr, "agent_transfer: %s: %s: %s\n", what, pdkv_status_name(st),
          err != NULL ? pdkv_error_message(err) : "");
  pdkv_error_free(err);
  return 1;
}

#define TRY(call, what)                                  \
  do {                                                   \
    pdkv_error_t *err_ = NULL;                           \
    pdkv_status_t st_ = (call);                          \
    if (st_ != PDKV_OK) return fail(st_, err_, (what)); \
  } while (0)
/* The error slot of the innermost TRY (or of a block declaring its own err_). */
#define ERR_OUT (&err_)

typedef struct node {
  pdkv_model_t *model;
  pdkv_engine_metadata_t *metadata;
  uint8_t *buffers[NUM_REGIONS];
  size_t sizes[NUM_REGIONS];
  pdkv_agent_t *agent;
  pdkv_memory_t *memory[NUM_REGIONS];
} node_t;

static void node_free(node_t *n) {
  uint32_t r;
  pdkv_agent_free(n->agent);
  for (r = 0; r < NUM_REGIONS; r++) {
    pdkv_memory_free(n->memory[r]);
    if (n->buffers[r] != NULL) munmap(n->buffers[r], n->sizes[r]);
  }
  pdkv_engine_metadata_free(n->metadata);
  pdkv_model_free(n->model);
  memset(n, 0, sizeof *n);
}

static int make_metadata(node_t *n, const char *engine_id, const uint64_t *bases,
                         pdkv_engine_metadata_t **out) {
  pdkv_engine_config_t config;
  pdkv_engine_layout_t layout;
  TRY(pdkv_engine_config_init(&config, ERR_OUT), "engine config");
  TRY(pdkv_engine_layout_init(&layout, ERR_OUT), "engine layout");
  layout.engine_id = engine_id;
  layout.num_regions = NUM_REGIONS;
  layout.num_logical_blocks = NUM_BLOCKS;
  layout.region_bases = bases;
  TRY(pdkv_engine_metadata_from_model(n->model, &config, &layout, out, ERR_OUT), "metadata");
  return 0;
}

/* Allocates and fills the rank's regions, builds its metadata at their addresses, creates the
 * agent on 127.0.0.1 (free port) and registers every region. */
static int node_new(node_t *n, int prefill, int32_t transport) {
  pdkv_model_desc_t desc;
  pdkv_engine_metadata_t *probe = NULL;
  const pdkv_metadata_region_t *regions = NULL;
  size_t count = 0, o;
  uint64_t bases[NUM_REGIONS];
  pdkv_agent_options_t opts;
  uint32_t r;
  const char *id = prefill ? P_ENGINE : D_ENGINE;

  memset(n, 0, sizeof *n);
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.name = "xfer-tiny";
  desc.num_kv_heads = 2;
  desc.head_size = 16;
  desc.head_size_v = 16;
  desc.dtype_bytes = 2;
  desc.layer_pattern = "**";
  TRY(pdkv_model_new(&desc, &n->model, ERR_OUT), "model");
  if (make_metadata(n, id, NULL, &probe) != 0) return 1;
  {
    pdkv_error_t *err_ = NULL;
    pdkv_status_t st_ = pdkv_engine_metadata_regions(probe, &regions, &count, ERR_OUT);
    for (r = 0; st_ == PDKV_OK && r < NUM_REGIONS && r < count; r++)
      n->sizes[r] = (size_t)(regions[r].block_len * regions[r].num_blocks);
    pdkv_engine_metadata_free(probe); /* owns regions */
    if (st_ != PDKV_OK) return fail(st_, err_, "probe regions");
    if (count != NUM_REGIONS) {
      fprintf(stderr, "agent_transfer: the metadata has %zu regions, expected %u\n", count, NUM_REGIONS);
      return 1;
    }
  }
  for (r = 0; r < NUM_REGIONS; r++) {
    void *p = mmap(NULL, n->sizes[r], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      perror("agent_transfer: mmap");
      return 1;
    }
    n->buffers[r] = (uint8_t *)p;
    for (o = 0; o < n->sizes[r]; o++) n->buffers[r][o] = prefill ? pattern(r, o) : (uint8_t)D_FILL;
    bases[r] = (uint64_t)(uintptr_t)p;
  }
  if (make_metadata(n, id, bases, &n->metadata) != 0) return 1;
  memset(&opts, 0, sizeof opts);
  opts.struct_size = sizeof opts;
  opts.metadata = n->metadata;
  opts.listen_address = "127.0.0.1:0";
  opts.transport = transport;
  opts.default_timeout_ms = 10000;
  opts.heartbeat_interval_ms = 100;
  opts.heartbeat_timeout_ms = 1500;
  opts.field_mask = PDKV_AGENT_FIELD_LISTEN_ADDRESS | PDKV_AGENT_FIELD_TRANSPORT |
                    PDKV_AGENT_FIELD_DEFAULT_TIMEOUT | PDKV_AGENT_FIELD_HEARTBEAT;
  TRY(pdkv_agent_new(&opts, &n->agent, ERR_OUT), "agent");
  for (r = 0; r < NUM_REGIONS; r++) {
    pdkv_memory_desc_t md;
    memset(&md, 0, sizeof md);
    md.struct_size = sizeof md;
    md.region = r;
    md.address = bases[r];
    md.length = n->sizes[r];
    TRY(pdkv_agent_register_memory(n->agent, &md, &n->memory[r], ERR_OUT), "register memory");
  }
  return 0;
}

static int listen_address(const node_t *n, char *buf, size_t cap) {
  pdkv_agent_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  TRY(pdkv_agent_get_info(n->agent, &info, ERR_OUT), "agent info");
  snprintf(buf, cap, "%s", info.listen_address);
  return 0;
}

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls notifications until REQUEST_COMPLETE (0) or LEASE_EXPIRED / the timeout (1). */
static int wait_complete(const node_t *p, const char *request, long timeout_ms) {
  const struct timespec nap = {0, 1000000};
  const long end = now_ms() + timeout_ms;
  do {
    pdkv_notification_list_t *list = NULL;
    const pdkv_notification_t *items = NULL;
    size_t count = 0, i;
    int done = -1;
    TRY(pdkv_agent_poll_notifications(p->agent, &list, ERR_OUT), "poll notifications");
    {
      pdkv_error_t *err_ = NULL;
      if (pdkv_notification_list_items(list, &items, &count, ERR_OUT) != PDKV_OK) count = 0;
      pdkv_error_free(err_);
    }
    for (i = 0; i < count && done < 0; i++) {
      const pdkv_notification_t n = items[i];
      if (strcmp(n.request_id, request) != 0) continue;
      if (n.kind == PDKV_NOTIFY_REQUEST_COMPLETE) done = 0;
      if (n.kind == PDKV_NOTIFY_LEASE_EXPIRED) {
        fprintf(stderr, "agent_transfer: request %s: lease expired after %u of %u\n", request, n.count,
                n.expected);
        done = 1;
      }
    }
    pdkv_notification_list_free(list);
    if (done >= 0) return done;
    nanosleep(&nap, NULL);
  } while (now_ms() < end);
  fprintf(stderr, "agent_transfer: no notification for request %s within %ld ms\n", request, timeout_ms);
  return 1;
}

/* D: plan from the peer's metadata, READ, wait, verify byte by byte. */
static int read_and_verify(const node_t *d, const char *request, uint64_t timeout_ms) {
  pdkv_peer_t *peer = NULL;
  pdkv_engine_metadata_t *p_md = NULL;
  pdkv_plan_context_t *ctx = NULL;
  pdkv_transfer_plan_t *plan = NULL;
  pdkv_transfer_t *t = NULL;
  pdkv_error_t *err = NULL;
  pdkv_status_t st;
  int rc = 1;
  const char *what = "";

  {
    pdkv_engine_metadata_info_t info;
    pdkv_plan_context_params_t params;
    pdkv_group_trim_input_t trim;
    pdkv_plan_group_t group;
    pdkv_transfer_params_t tp;
    const pdkv_plan_read_t *reads = NULL;
    size_t n_reads = 0, i, r, o;
    uint64_t bytes = 0;
    uint8_t finished = 0;
    uint8_t *want[NUM_REGIONS] = {NULL, NULL};

    /* A D rank keeps P's lease of a request open until it reads it (a real engine does this
     * periodically for requests queued behind others, as vLLM's "HB:" notifications do). */
    what = "keep lease";
    if ((st = pdkv_agent_keep_leases(d->agent, P_ENGINE, &request, 1, &err)) != PDKV_OK) goto out;
    what = "find peer";
    if ((st = pdkv_agent_find_peer(d->agent, P_ENGINE, 0, &peer, &err)) != PDKV_OK) goto out;
    what = "peer metadata";
    if ((st = pdkv_peer_metadata(peer, &p_md, &err)) != PDKV_OK) goto out;
    what = "metadata info";
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if ((st = pdkv_engine_metadata_get_info(d->metadata, &info, &err)) != PDKV_OK) goto out;
    memset(&params, 0, sizeof params);
    params.struct_size = sizeof params;
    params.local = d->metadata;
    params.remote = (const pdkv_engine_metadata_t *const *)&p_md;
    params.num_remote = 1;
    what = "plan context";
    if ((st = pdkv_plan_context_new(&params, &ctx, &err)) != PDKV_OK) goto out;
    memset(&trim, 0, sizeof trim);
    trim.struct_size = sizeof trim;
    trim.kind = PDKV_GROUP_ATTENTION;
    trim.local_blocks = D_BLOCKS;
    trim.num_local_blocks = 3;
    trim.remote_blocks = P_BLOCKS;
    trim.num_remote_blocks = 3;
    trim.remote_computed_tokens = 3u * info.logical_block_size;
    memset(&group, 0, sizeof group);
    group.struct_size = sizeof group;
    group.trim = &trim;
    what = "plan";
    if ((st = pdkv_transfer_plan_compile(ctx, &group, 1, &plan, &err)) != PDKV_OK) goto out;
    memset(&tp, 0, sizeof tp);
    tp.struct_size = sizeof tp;
    tp.field_mask = PDKV_TRANSFER_FIELD_TIMEOUT;
    tp.op = PDKV_TRANSFER_READ;
    tp.plan = plan;
    tp.peer_engine_id = P_ENGINE;
    tp.request_id = request;
    tp.timeout_ms = timeout_ms;
    what = "post";
    if ((st = pdkv_agent_post(d->agent, &tp, &t, &err)) != PDKV_OK) goto out;
    what = "transfer";
    if ((st = pdkv_transfer_wait(t, UINT64_MAX, &finished, &err)) != PDKV_OK) goto out;
    what = "rank reads";
    if ((st = pdkv_transfer_plan_rank_reads(plan, 0, &reads, &n_reads, &bytes, &err)) != PDKV_OK) goto out;
    st = PDKV_OK;
    if (!finished || n_reads == 0) {
      fprintf(stderr, "agent_transfer: transfer not finished (%d) or plan without reads (%zu)\n", finished, n_reads);
      goto out;
    }
    for (r = 0; r < NUM_REGIONS; r++) {
      want[r] = (uint8_t *)malloc(d->sizes[r]);
      if (want[r] == NULL) goto verify_out;
      memset(want[r], D_FILL, d->sizes[r]);
    }
    for (i = 0; i < n_reads; i++)
      for (o = 0; o < reads[i].length; o++)
        want[reads[i].local_region][reads[i].local_offset + o] =
            pattern(reads[i].remote_region, reads[i].remote_offset + o);
    for (r = 0; r < NUM_REGIONS; r++)
      for (o = 0; o < d->sizes[r]; o++)
        if (d->buffers[r][o] != want[r][o]) {
          fprintf(stderr, "agent_transfer: D region %zu byte %zu: got %#04x, want %#04x\n", r, o,
                  d->buffers[r][o], want[r][o]);
          goto verify_out;
        }
    printf("VERIFIED %llu\n", (unsigned long long)bytes);
    rc = 0;
  verify_out:
    for (r = 0; r < NUM_REGIONS; r++) free(want[r]);
  }
out:
  if (st != PDKV_OK) rc = fail(st, err, what);
  pdkv_transfer_free(t);
  pdkv_transfer_plan_free(plan);
  pdkv_plan_context_free(ctx);
  pdkv_engine_metadata_free(p_md);
  pdkv_peer_free(peer);
  return rc;
}

static int connect_to(const node_t *d, const char *address, uint64_t timeout_ms) {
  pdkv_connect_options_t co;
  pdkv_peer_t *peer = NULL;
  memset(&co, 0, sizeof co);
  co.struct_size = sizeof co;
  co.field_mask = PDKV_CONNECT_FIELD_TIMEOUT;
  co.address = address;
  co.timeout_ms = timeout_ms;
  TRY(pdkv_agent_connect(d->agent, &co, &peer, ERR_OUT), "connect");
  pdkv_peer_free(peer);
  return 0;
}

int main(int argc, char **argv) {
  const char *role = "both", *connect = NULL, *request = "req-1";
  int32_t transport = PDKV_TRANSPORT_AUTO;
  long timeout_ms = 20000;
  node_t p, d;
  char addr[128];
  int i, rc = 1;

  for (i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) {
      fprintf(stderr, "agent_transfer: %s needs a value\n", argv[i]);
      return 2;
    }
    if (strcmp(argv[i], "--role") == 0) role = v;
    else if (strcmp(argv[i], "--connect") == 0) connect = v;
    else if (strcmp(argv[i], "--request") == 0) request = v;
    else if (strcmp(argv[i], "--timeout-ms") == 0) timeout_ms = strtol(v, NULL, 10);
    else if (strcmp(argv[i], "--transport") == 0) {
      if (strcmp(v, "shm") == 0) transport = PDKV_TRANSPORT_SHM;
      else if (strcmp(v, "tcp") == 0) transport = PDKV_TRANSPORT_TCP;
      else if (strcmp(v, "auto") != 0) {
        fprintf(stderr, "agent_transfer: unknown transport %s\n", v);
        return 2;
      }
    } else {
      fprintf(stderr, "agent_transfer: unknown argument %s\n", argv[i]);
      return 2;
    }
    i++;
  }
  if (timeout_ms <= 0) {
    fprintf(stderr, "agent_transfer: --timeout-ms must be positive\n");
    return 2;
  }
  memset(&p, 0, sizeof p);
  memset(&d, 0, sizeof d);
  if (strcmp(role, "p") == 0) {
    if (node_new(&p, 1, transport) == 0 && listen_address(&p, addr, sizeof addr) == 0) {
      pdkv_error_t *err = NULL;
      pdkv_status_t st = pdkv_agent_lease(p.agent, request, 1, (uint64_t)timeout_ms, &err);
      if (st != PDKV_OK) {
        rc = fail(st, err, "lease");
      } else {
        printf("LISTEN %s\n", addr);
        fflush(stdout);
        rc = wait_complete(&p, request, timeout_ms);
        if (rc == 0) printf("P: request %s read by D\n", request);
      }
    }
  } else if (strcmp(role, "d") == 0) {
    if (connect == NULL) {
      fprintf(stderr, "agent_transfer: --role d needs --connect\n");
      return 2;
    }
    if (node_new(&d, 0, transport) == 0 && connect_to(&d, connect, (uint64_t)timeout_ms) == 0)
      rc = read_and_verify(&d, request, (uint64_t)timeout_ms);
  } else if (strcmp(role, "both") == 0) {
    if (node_new(&p, 1, transport) == 0 && node_new(&d, 0, transport) == 0 &&
        listen_address(&p, addr, sizeof addr) == 0) {
      pdkv_error_t *err = NULL;
      pdkv_status_t st = pdkv_agent_lease(p.agent, request, 1, (uint64_t)timeout_ms, &err);
      if (st != PDKV_OK) rc = fail(st, err, "lease");
      else if (connect_to(&d, addr, (uint64_t)timeout_ms) == 0 &&
               read_and_verify(&d, request, (uint64_t)timeout_ms) == 0)
        rc = wait_complete(&p, request, timeout_ms);
    }
  } else {
    fprintf(stderr, "agent_transfer: unknown role %s\n", role);
    return 2;
  }
  node_free(&d);
  node_free(&p);
  return rc;
}
