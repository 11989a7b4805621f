//! The transfer executor through the safe API: two agents in this process (a P and a D rank of
//! the shared "xfer" setup, real memory) move a request and every byte is checked; deadlines
//! (connect, transfer), cancellation (cancel, dropping a transfer), a peer that dies, leases,
//! notifications, authentication and the refusals of bad input.
#[path = "../examples/xfer_setup/mod.rs"]
mod xfer;

use pdkv::*;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(10);

fn node(prefill: bool, transport: Transport, mode: ProgressMode) -> xfer::Node {
    xfer::node(&xfer::model().unwrap(), prefill, transport, mode).unwrap()
}

fn addr(n: &xfer::Node) -> String {
    n.agent.info().unwrap().listen_address
}

fn plan_for(d: &xfer::Node) -> TransferPlan {
    let p_meta = d
        .agent
        .find_peer(xfer::P_ENGINE, 0)
        .unwrap()
        .metadata()
        .unwrap();
    xfer::plan(&d.metadata, &p_meta).unwrap()
}

fn wait_kind(a: &Agent, kind: NotificationKind, request: &str) -> Notification {
    a.wait_notification(LONG, |n| n.kind == kind && n.request_id == request)
        .unwrap()
        .unwrap_or_else(|| panic!("no {kind:?} notification for {request:?}"))
}

/// Runs `f` while a thread drives `agent`'s progress (an agent in caller mode answers the
/// handshake and serves GETs only while someone calls progress).
fn pumping<T>(agent: &Agent, f: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                agent.progress().unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let out = f();
        stop.store(true, Ordering::Relaxed);
        out
    })
}

/// A D rank connected over TCP to a P rank in caller mode that nobody progresses after the
/// handshake: a D read then makes no progress (UCX TCP needs the target to progress), which
/// gives deadlines and cancellation something to act on.
fn stalled_pair() -> (xfer::Node, xfer::Node) {
    let p = node(true, Transport::Tcp, ProgressMode::Caller);
    let d = node(false, Transport::Tcp, ProgressMode::Thread);
    pumping(&p.agent, || d.agent.connect(&addr(&p), Some(LONG)).unwrap());
    (p, d)
}

#[test]
fn read_moves_every_byte_and_notifies() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    let d = node(false, Transport::Auto, ProgressMode::Thread);
    p.agent.lease("req-1", 1, LONG).unwrap();
    let peer = d.agent.connect(&addr(&p), Some(LONG)).unwrap();
    let pi = peer.info().unwrap();
    assert_eq!((pi.engine_id.as_str(), pi.tp_rank), (xfer::P_ENGINE, 0));
    assert!(
        pi.connected && !pi.inbound && pi.lost_status.is_none(),
        "{pi:?}"
    );
    assert!(
        matches!(pi.transport, Transport::Shm | Transport::Tcp),
        "{pi:?}"
    );
    let info = d.agent.info().unwrap();
    assert_eq!(
        (info.engine_id.as_str(), info.tp_rank, info.tp_size),
        (xfer::D_ENGINE, 0, 1)
    );
    assert!(info.port != 0 && info.listen_address.ends_with(&format!(":{}", info.port)));
    assert_eq!(info.num_peers, 1);
    assert!(
        peer.metadata().unwrap()
            == *d
                .agent
                .find_peer(xfer::P_ENGINE, 0)
                .unwrap()
                .metadata()
                .as_ref()
                .unwrap()
    );

    let plan = plan_for(&d);
    let total = plan.info().unwrap().bytes;
    let t = d
        .agent
        .post(&TransferParams::read(&plan, xfer::P_ENGINE, "req-1").timeout(LONG))
        .unwrap();
    // The done fd: readable once the transfer is final (and still readable after).
    let done_fd = t.done_fd().unwrap();
    assert_eq!(t.done_fd().unwrap(), done_fd, "one descriptor per transfer");
    let mut pfd = PollFd {
        fd: done_fd,
        events: 1, // POLLIN
        revents: 0,
    };
    // SAFETY: one valid pollfd; the descriptor lives as long as `t`.
    assert_eq!(
        unsafe { poll(&mut pfd, 1, 10_000) },
        1,
        "not final within 10 s"
    );
    assert!(t.wait(Some(Duration::ZERO)).unwrap());
    // SAFETY: as above.
    assert_eq!(unsafe { poll(&mut pfd, 1, 0) }, 1, "no longer readable");
    assert!(t.wait(None).unwrap());
    let ti = t.info().unwrap();
    assert_eq!((ti.state, ti.status), (TransferState::Done, None));
    assert_eq!(
        (ti.bytes_total, ti.bytes_done, ti.reads_failed),
        (total, total, 0)
    );
    assert_eq!(ti.operations_done, ti.operations_total);
    assert!(t.failed_reads().unwrap().is_empty());
    assert_eq!(xfer::verify(&plan, &d.memory).unwrap(), total);
    // P's memory is untouched by a read.
    for (r, m) in p.memory.iter().enumerate() {
        let b = m.buffer().unwrap().to_vec();
        assert!(b
            .iter()
            .enumerate()
            .all(|(o, &x)| x == xfer::pattern(r as u32, o as u64)));
    }

    let done = wait_kind(&p.agent, NotificationKind::ReadDone, "req-1");
    assert_eq!(
        (done.engine_id.as_str(), done.tp_rank, done.status),
        (xfer::D_ENGINE, 0, None)
    );
    assert_eq!((done.bytes, done.count, done.expected), (total, 1, 1));
    let complete = wait_kind(&p.agent, NotificationKind::RequestComplete, "req-1");
    assert_eq!((complete.count, complete.expected), (1, 1));

    let pi = peer.info().unwrap();
    assert_eq!(
        (pi.bytes_read, pi.transfers_done, pi.transfers_failed),
        (total, 1, 0)
    );
    assert!(pi.notifications_sent >= 1, "{pi:?}");
    let back = p
        .agent
        .find_peer(xfer::D_ENGINE, 0)
        .unwrap()
        .info()
        .unwrap();
    assert!(
        back.inbound && back.connected && back.notifications_received >= 1,
        "{back:?}"
    );
    // Single-stage engines are stage 0; another stage is not connected.
    assert!(p.agent.find_stage_peer(xfer::D_ENGINE, 0, 0).is_ok());
    let e = p.agent.find_stage_peer(xfer::D_ENGINE, 1, 0).unwrap_err();
    assert_eq!(e.status(), Status::NotFound, "{e}");
    assert!(e.to_string().contains("stage 1 rank 0"), "{e}");
}

#[test]
fn shared_host_buffer_is_read_through_the_peers_mapping() {
    let model = xfer::model().unwrap();
    let p = xfer::node_in(&model, true, Transport::Shm, ProgressMode::Thread, true).unwrap();
    let d = node(false, Transport::Shm, ProgressMode::Thread);
    let peer = d.agent.connect(&addr(&p), Some(LONG)).unwrap();
    assert_eq!(peer.info().unwrap().mapped_regions as usize, p.memory.len());
    let plan = plan_for(&d);
    let total = plan.info().unwrap().bytes;
    let t = d
        .agent
        .post(&TransferParams::read(&plan, xfer::P_ENGINE, "req-m").timeout(LONG))
        .unwrap();
    assert!(t.wait(None).unwrap());
    assert_eq!(xfer::verify(&plan, &d.memory).unwrap(), total);
    let pi = peer.info().unwrap();
    assert_eq!((pi.bytes_mapped, pi.bytes_read), (total, total));
    assert_eq!(
        HostBuffer::new_shared(0).unwrap_err().status(),
        Status::InvalidArgument
    );
    let mut b = HostBuffer::new_shared(100).unwrap();
    assert_eq!((b.len(), b.addr() % 4096), (100, 0));
    assert!(b.as_mut_slice().iter().all(|&x| x == 0));
    b.as_mut_slice()[99] = 5;
    assert_eq!(b.to_vec()[99], 5);
}

#[test]
fn write_moves_every_byte() {
    let p = node(true, Transport::Shm, ProgressMode::Thread);
    let d = node(false, Transport::Shm, ProgressMode::Thread);
    d.agent.connect(&addr(&p), Some(LONG)).unwrap();
    // P compiles the same plan from D's advertised metadata and pushes its reads.
    let d_meta = p
        .agent
        .find_peer(xfer::D_ENGINE, 0)
        .unwrap()
        .metadata()
        .unwrap();
    assert!(d_meta == d.metadata);
    let plan = xfer::plan(&d_meta, &p.metadata).unwrap();
    d.agent.lease("w-1", 1, LONG).unwrap();
    let t = p
        .agent
        .post(&TransferParams::write(&plan, xfer::D_ENGINE, "w-1"))
        .unwrap();
    assert!(t.wait(Some(LONG)).unwrap());
    let n = wait_kind(&d.agent, NotificationKind::WriteDone, "w-1");
    assert_eq!((n.engine_id.as_str(), n.status), (xfer::P_ENGINE, None));
    wait_kind(&d.agent, NotificationKind::RequestComplete, "w-1");
    assert_eq!(
        xfer::verify(&plan, &d.memory).unwrap(),
        plan.info().unwrap().bytes
    );
    let pi = p
        .agent
        .find_peer(xfer::D_ENGINE, 0)
        .unwrap()
        .info()
        .unwrap();
    assert_eq!(pi.bytes_written, plan.info().unwrap().bytes);
}

#[test]
fn caller_mode_moves_bytes_with_explicit_progress() {
    let p = node(true, Transport::Tcp, ProgressMode::Caller);
    let d = node(false, Transport::Tcp, ProgressMode::Caller);
    assert_eq!(d.agent.info().unwrap().progress_mode, ProgressMode::Caller);
    assert!(d.agent.event_fd().unwrap() >= 0);
    pumping(&p.agent, || {
        pumping(&d.agent, || d.agent.connect(&addr(&p), Some(LONG)).unwrap());
        let plan = plan_for(&d);
        // In caller mode the wait drives D's progress itself; P is pumped by the thread.
        let t = d
            .agent
            .post(&TransferParams::read(&plan, xfer::P_ENGINE, "c-1"))
            .unwrap();
        assert!(t.wait(Some(LONG)).unwrap());
        xfer::verify(&plan, &d.memory).unwrap();
    });
}

#[test]
fn connect_deadline_expires_on_a_silent_peer() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = silent.local_addr().unwrap().to_string();
    let d = node(false, Transport::Tcp, ProgressMode::Thread);
    let start = Instant::now();
    let e = d
        .agent
        .connect(&target, Some(Duration::from_millis(300)))
        .unwrap_err();
    assert_eq!(e.status(), Status::TimedOut, "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    // Nobody listening: refused.
    drop(silent);
    let e = d.agent.connect(&target, Some(LONG)).unwrap_err();
    assert_eq!(e.status(), Status::PeerLost, "{e}");
}

#[test]
fn transfer_deadline_expires() {
    let (_p, d) = stalled_pair();
    let plan = plan_for(&d);
    let start = Instant::now();
    let t = d
        .agent
        .post(
            &TransferParams::read(&plan, xfer::P_ENGINE, "late")
                .timeout(Duration::from_millis(300)),
        )
        .unwrap();
    // A bounded wait that ends first reports "not finished", not an error.
    assert!(!t.wait(Some(Duration::from_millis(20))).unwrap());
    assert_eq!(t.info().unwrap().state, TransferState::InFlight);
    let e = t.wait(None).unwrap_err();
    assert_eq!(e.status(), Status::TimedOut, "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let ti = t.info().unwrap();
    assert_eq!(
        (ti.state, ti.status),
        (TransferState::Failed, Some(Status::TimedOut))
    );
    let failed = t.failed_reads().unwrap();
    assert!(
        !failed.is_empty() && failed.len() as u64 == ti.reads_failed,
        "{failed:?} {ti:?}"
    );
    let n_reads = plan.rank_reads(0).unwrap().0.len() as u64;
    assert!(failed
        .iter()
        .all(|f| f.p_tp_rank == 0 && f.read_index < n_reads));
}

#[test]
fn cancel_and_dropping_a_transfer() {
    let (p, d) = stalled_pair();
    let plan = plan_for(&d);
    let t = d
        .agent
        .post(&TransferParams::read(&plan, xfer::P_ENGINE, "cancelled").timeout(LONG))
        .unwrap();
    t.cancel().unwrap();
    let start = Instant::now();
    let e = pumping(&p.agent, || t.wait(None)).unwrap_err();
    assert_eq!(e.status(), Status::Cancelled, "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(t.info().unwrap().status, Some(Status::Cancelled));
    t.cancel().unwrap(); // no effect on a finished transfer
    assert_eq!(t.info().unwrap().status, Some(Status::Cancelled));

    // Dropping an in-flight transfer cancels it; the agent keeps working afterwards.
    let dropped = d
        .agent
        .post(&TransferParams::read(&plan, xfer::P_ENGINE, "dropped").timeout(LONG))
        .unwrap();
    drop(dropped);
    pumping(&p.agent, || {
        let t = d
            .agent
            .post(&TransferParams::read(&plan, xfer::P_ENGINE, "after"))
            .unwrap();
        assert!(t.wait(Some(LONG)).unwrap());
    });
    xfer::verify(&plan, &d.memory).unwrap();
}

#[test]
fn a_peer_that_dies() {
    let (p, d) = stalled_pair();
    let plan = plan_for(&d);
    let peer = d.agent.find_peer(xfer::P_ENGINE, 0).unwrap();
    let t = d
        .agent
        .post(&TransferParams::read(&plan, xfer::P_ENGINE, "orphan").timeout(LONG))
        .unwrap();
    let start = Instant::now();
    drop(p); // P shuts down: its agent says Bye and closes.
    let e = t.wait(None).unwrap_err();
    assert_eq!(e.status(), Status::PeerLost, "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let lost = d
        .agent
        .wait_notification(LONG, |n| n.kind == NotificationKind::PeerLost)
        .unwrap()
        .expect("PEER_LOST notification");
    assert_eq!((lost.engine_id.as_str(), lost.tp_rank), (xfer::P_ENGINE, 0));
    let pi = peer.info().unwrap();
    assert!(!pi.connected && pi.lost_status.is_some(), "{pi:?}");
    assert_eq!(pi.transfers_failed, 1);
    // Nothing to read from any more.
    let e = d
        .agent
        .post(&TransferParams::read(&plan, xfer::P_ENGINE, "late"))
        .unwrap_err();
    assert_eq!(e.status(), Status::NotFound, "{e}");
    assert!(e.message().contains(xfer::P_ENGINE), "{e}");
    peer.disconnect().unwrap(); // fine on a lost peer
}

#[test]
fn handles_outlive_their_agent() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    let d = node(false, Transport::Auto, ProgressMode::Thread);
    let peer = d.agent.connect(&addr(&p), Some(LONG)).unwrap();
    let plan = plan_for(&d);
    let t = d
        .agent
        .post(&TransferParams::read(&plan, xfer::P_ENGINE, "r"))
        .unwrap();
    assert!(t.wait(Some(LONG)).unwrap());
    let xfer::Node { agent, memory, .. } = d;
    drop(agent);
    // Freed in any order: the transfer keeps its final state, the peer reports it is gone.
    assert_eq!(t.info().unwrap().state, TransferState::Done);
    assert!(!peer.info().unwrap().connected);
    xfer::verify(&plan, &memory).unwrap();
    drop(memory);
}

#[test]
fn leases_expire() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    p.agent
        .lease("never", 2, Duration::from_millis(100))
        .unwrap();
    let n = wait_kind(&p.agent, NotificationKind::LeaseExpired, "never");
    assert_eq!((n.count, n.expected), (0, 2));
    assert_eq!(
        p.agent.lease("", 1, LONG).unwrap_err().status(),
        Status::InvalidArgument
    );
    assert_eq!(
        p.agent.lease("x", 0, LONG).unwrap_err().status(),
        Status::InvalidArgument
    );
    let e = p.agent.lease("x", 1, Duration::ZERO).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("lease ttl"), "{e}");
    assert_eq!(
        p.agent
            .lease(&"r".repeat(1025), 1, LONG)
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
}

/// A read posted after P's lease of the request expired fails with `TimedOut` naming the lease,
/// every read listed as failed (2.7: P confirms its lease first); `confirm_lease(false)` reads it
/// as before (done when the data lands).
#[test]
fn a_read_of_an_ended_lease_fails_unless_told_not_to_confirm() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    let d = node(false, Transport::Auto, ProgressMode::Thread);
    let _peer = d.agent.connect(&addr(&p), Some(LONG)).unwrap();
    p.agent.lease("late", 1, Duration::from_millis(30)).unwrap();
    wait_kind(&p.agent, NotificationKind::LeaseExpired, "late");
    let plan = plan_for(&d);
    let reads = plan.rank_reads(0).unwrap().0.len();
    let t = d
        .agent
        .post(&TransferParams::read(&plan, xfer::P_ENGINE, "late").timeout(LONG))
        .unwrap();
    let e = t.wait(None).unwrap_err();
    assert_eq!(e.status(), Status::TimedOut, "{e}");
    assert!(
        e.message()
            .contains("lease of request 'late' expired before this READ asked"),
        "{e}"
    );
    assert_eq!(t.failed_reads().unwrap().len(), reads);
    let t = d
        .agent
        .post(
            &TransferParams::read(&plan, xfer::P_ENGINE, "late")
                .timeout(LONG)
                .confirm_lease(false),
        )
        .unwrap();
    assert!(t.wait(None).unwrap());
    assert_eq!(
        xfer::verify(&plan, &d.memory).unwrap(),
        plan.info().unwrap().bytes
    );
}

/// A reader's keep-alives (`keep_leases`, 2.6) hold P's lease open past its ttl; a lease nobody
/// keeps expires beside it; an id with a comma is one id.
#[test]
fn keep_leases_holds_the_other_sides_lease_open() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    let d = node(false, Transport::Auto, ProgressMode::Thread);
    assert_eq!(
        d.agent
            .keep_leases(xfer::P_ENGINE, &["r"])
            .unwrap_err()
            .status(),
        Status::NotFound
    );
    let peer = d.agent.connect(&addr(&p), Some(LONG)).unwrap();
    let ttl = Duration::from_millis(1000);
    p.agent.lease("req,1", 1, ttl).unwrap();
    p.agent.lease("plain", 1, ttl).unwrap();
    let end = std::time::Instant::now() + Duration::from_millis(2500);
    while std::time::Instant::now() < end {
        d.agent
            .keep_leases(xfer::P_ENGINE, &["req,1", "unknown"])
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let expired: Vec<String> = p
        .agent
        .poll_notifications()
        .unwrap()
        .into_iter()
        .filter(|n| n.kind == NotificationKind::LeaseExpired)
        .map(|n| n.request_id)
        .collect();
    assert_eq!(expired, vec!["plain".to_string()]);
    wait_kind(&p.agent, NotificationKind::LeaseExpired, "req,1");
    let sent = peer.info().unwrap().lease_keeps_sent;
    assert!(sent >= 20, "{sent}");
    let on_p = p.agent.find_peer(xfer::D_ENGINE, 0).unwrap();
    assert_eq!(on_p.info().unwrap().lease_keeps_received, sent);
    let e = d.agent.keep_leases(xfer::P_ENGINE, &["a", ""]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("request_ids[1]"), "{e}");
    assert_eq!(
        d.agent
            .keep_leases(xfer::P_ENGINE, &["a\0b"])
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
    d.agent
        .keep_leases(xfer::P_ENGINE, &Vec::<String>::new())
        .unwrap();
}

#[test]
fn preshared_keys() {
    let model = xfer::model().unwrap();
    let mk = |prefill: bool, key: &[u8]| {
        let r = xfer::rank(&model, prefill).unwrap();
        Agent::new(&AgentOptions::new(&r.metadata).preshared_key(key)).unwrap()
    };
    let p = mk(true, b"0123456789abcdef-secret");
    let d_ok = mk(false, b"0123456789abcdef-secret");
    let d_bad = mk(false, b"0123456789abcdef-wrong!");
    let target = p.info().unwrap().listen_address;
    let e = d_bad.connect(&target, Some(LONG)).unwrap_err();
    assert_eq!(e.status(), Status::Auth, "{e}");
    d_ok.connect(&target, Some(LONG)).unwrap();
}

#[test]
fn debug_never_prints_the_preshared_key() {
    let model = xfer::model().unwrap();
    let r = xfer::rank(&model, true).unwrap();
    let key = b"0123456789abcdef-do-not-print";
    let opts = AgentOptions::new(&r.metadata)
        .preshared_key(b"an-earlier-key-0123")
        .preshared_key(key)
        .max_outstanding(7);
    let shown = format!("{opts:?}");
    assert!(shown.contains("<29 bytes, not shown>"), "{shown}");
    assert!(shown.contains("max_outstanding: Some(7)"), "{shown}");
    // Neither the text nor the bytes as Debug prints a Vec<u8> ("48, 49, ...").
    let as_numbers = format!("{:?}", &key[..4]);
    for needle in [
        "do-not-print",
        "0123456789abcdef",
        "an-earlier-key",
        &as_numbers[1..as_numbers.len() - 1],
    ] {
        assert!(!shown.contains(needle), "{needle:?} in {shown}");
    }
    let clone = opts.clone();
    drop(opts); // the clone holds its own copy: still usable after the original's is wiped
    Agent::new(&clone).unwrap();
}

#[test]
fn seal_data_is_passed_through() {
    let model = xfer::model().unwrap();
    let key = b"0123456789abcdef-secret";
    let mk = |prefill: bool, seal: Option<bool>| {
        let r = xfer::rank(&model, prefill).unwrap();
        let mut o = AgentOptions::new(&r.metadata)
            .preshared_key(key)
            .transport(Transport::Tcp);
        if let Some(s) = seal {
            o = o.seal_data(s);
        }
        Agent::new(&o).unwrap()
    };
    let p = mk(true, Some(false));
    let target = p.info().unwrap().listen_address;
    // Sealed by default with a key: P's seal_data(false) makes the pair differ.
    let e = mk(false, None).connect(&target, Some(LONG)).unwrap_err();
    assert_eq!(e.status(), Status::Auth, "{e}");
    assert!(
        e.message().contains("seal_data off") && e.message().contains("seal_data on"),
        "{e}"
    );
    mk(false, Some(false)).connect(&target, Some(LONG)).unwrap();
    // Sealing needs a key.
    let r = xfer::rank(&model, true).unwrap();
    let e = Agent::new(&AgentOptions::new(&r.metadata).seal_data(true)).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("seal_data 1"), "{e}");
}

/// `min_peer_protocol_minor` (2.7) reaches the agent: a peer of this build passes a strict
/// agent; a minor newer than this build's is refused at creation naming the field.
#[test]
fn min_peer_protocol_minor_is_passed_through() {
    let model = xfer::model().unwrap();
    let current = CONTROL_PROTOCOL_MINOR;
    let rp = xfer::rank(&model, true).unwrap();
    let rd = xfer::rank(&model, false).unwrap();
    let p = Agent::new(&AgentOptions::new(&rp.metadata).min_peer_protocol_minor(current)).unwrap();
    let d = Agent::new(&AgentOptions::new(&rd.metadata).min_peer_protocol_minor(current)).unwrap();
    d.connect(&p.info().unwrap().listen_address, Some(LONG))
        .unwrap();
    let e = Agent::new(&AgentOptions::new(&rp.metadata).min_peer_protocol_minor(current + 1))
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    assert!(
        e.message()
            .contains(&format!("min_peer_protocol_minor {} is newer", current + 1)),
        "{e}"
    );
}

#[test]
fn refusals_name_the_value() {
    let model = xfer::model().unwrap();
    let r = xfer::rank(&model, true).unwrap();
    let bad = |o: AgentOptions<'_>| Agent::new(&o).unwrap_err();
    let e = bad(AgentOptions::new(&r.metadata).transport(Transport::Other(9)));
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains('9'), "{e}");
    let e = bad(AgentOptions::new(&r.metadata).progress_mode(ProgressMode::Other(7)));
    assert_eq!(e.status(), Status::InvalidArgument);
    let e = bad(AgentOptions::new(&r.metadata).preshared_key(b"short"));
    assert_eq!(e.status(), Status::InvalidArgument);
    let e =
        bad(AgentOptions::new(&r.metadata)
            .heartbeat(Duration::from_secs(2), Duration::from_secs(1)));
    assert_eq!(e.status(), Status::InvalidArgument);
    let e = bad(AgentOptions::new(&r.metadata).default_timeout(Duration::ZERO));
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("default_timeout"), "{e}");
    let e = bad(AgentOptions::new(&r.metadata).default_timeout(Duration::MAX));
    assert_eq!(e.status(), Status::InvalidArgument);
    let e = bad(AgentOptions::new(&r.metadata).heartbeat(
        Duration::from_millis(1),
        Duration::from_secs(u64::from(u32::MAX)),
    ));
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("heartbeat timeout"), "{e}");
    for n in [0, 17] {
        let e = bad(AgentOptions::new(&r.metadata).copy_threads(n));
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().contains("copy_threads"), "{e}");
    }
    let default = if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 4 {
        2
    } else {
        1
    };
    let a = Agent::new(&AgentOptions::new(&r.metadata)).unwrap();
    assert_eq!(a.info().unwrap().copy_threads, default);
    for n in [1, 3, 16] {
        let a = Agent::new(&AgentOptions::new(&r.metadata).copy_threads(n)).unwrap();
        assert_eq!(a.info().unwrap().copy_threads, n);
    }
    let e = bad(AgentOptions::new(&r.metadata).listen_address("no-port"));
    assert_eq!(e.status(), Status::InvalidArgument);
    let e = bad(AgentOptions::new(&r.metadata).listen_address("a\0b"));
    assert_eq!(e.status(), Status::InvalidArgument);

    // Registration must match the advertised region exactly.
    let a = Agent::new(&AgentOptions::new(&r.metadata)).unwrap();
    let regions = r.metadata.regions().unwrap();
    let size = (regions[0].block_len * regions[0].num_blocks) as usize;
    let e = a
        .register_buffer(0, HostBuffer::new(size).unwrap())
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    let xfer::Rank { buffers, .. } = r;
    let mut bufs = buffers.into_iter();
    let b0 = bufs.next().unwrap();
    let e = a
        .register_buffer(5, HostBuffer::new(size).unwrap())
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    let desc = MemoryDesc {
        region: 0,
        address: b0.addr(),
        length: b0.len() as u64,
        memory_type: MemoryType::Cuda,
        device: 0,
    };
    // SAFETY: refused before any registration exists.
    let e = unsafe { a.register_memory(&desc) }.unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    let m0 = a.register_buffer(0, b0).unwrap();
    let again = MemoryDesc {
        memory_type: MemoryType::Host,
        ..desc
    };
    // SAFETY: refused (region already registered); nothing is registered twice.
    let e = unsafe { a.register_memory(&again) }.unwrap_err();
    assert_eq!(e.status(), Status::Busy, "{e}");
    m0.deregister().unwrap();
    m0.deregister().unwrap(); // twice is fine
    assert_eq!(
        HostBuffer::new(0).unwrap_err().status(),
        Status::InvalidArgument
    );
    let hb = HostBuffer::new(16).unwrap();
    assert_eq!(
        hb.write_at(10, &[0; 7]).unwrap_err().status(),
        Status::OutOfBounds
    );
    assert_eq!(hb.addr() % 4096, 0);

    assert_eq!(
        a.find_peer("nobody", 0).unwrap_err().status(),
        Status::NotFound
    );
    assert_eq!(
        a.connect("a\0b", None).unwrap_err().status(),
        Status::InvalidArgument
    );
    assert_eq!(
        a.connect("127.0.0.1:1", Some(Duration::ZERO))
            .unwrap_err()
            .status(),
        Status::InvalidArgument
    );
}

#[test]
fn post_refusals() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    let d = node(false, Transport::Auto, ProgressMode::Thread);
    d.agent.connect(&addr(&p), Some(LONG)).unwrap();
    let plan = plan_for(&d);
    let post = |params: TransferParams<'_>| d.agent.post(&params).unwrap_err();
    let e = post(TransferParams::read(&plan, xfer::P_ENGINE, ""));
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    let long = "x".repeat(1025);
    let e = post(TransferParams::read(&plan, xfer::P_ENGINE, &long));
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    let e = post(TransferParams {
        op: TransferOp::Other(5),
        ..TransferParams::read(&plan, xfer::P_ENGINE, "r")
    });
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    // The plan names its P engine: posting it against another one is refused.
    let e = post(TransferParams::read(&plan, "other-engine", "r"));
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    let e = post(TransferParams::read(&plan, xfer::P_ENGINE, "r").timeout(Duration::ZERO));
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
}

#[test]
fn executor_handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Agent>();
    send_sync::<Peer>();
    send_sync::<Memory>();
    send_sync::<Transfer>();
    send_sync::<HostBuffer>();
}

/// The calling thread's voluntary context switches so far (each sleep is at least one).
fn voluntary_switches() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("voluntary_ctxt_switches:"))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// An idle wait sleeps on the agent's event fd instead of waking on a timer: 300 ms on a
/// connected, silent agent put the waiting thread to sleep a few times (the 100 us..5 ms naps
/// it replaced slept ~60 times). The same in caller mode, whose wait must still drive P's side
/// of a read.
#[test]
fn wait_notification_sleeps_on_the_event_fd() {
    for (transport, mode) in [
        (Transport::Auto, ProgressMode::Thread),
        (Transport::Tcp, ProgressMode::Caller),
    ] {
        let p = node(true, transport, mode);
        let d = node(false, transport, mode);
        pumping(&p.agent, || {
            pumping(&d.agent, || d.agent.connect(&addr(&p), Some(LONG)).unwrap())
        });
        p.agent.poll_notifications().unwrap();
        let before = voluntary_switches();
        let start = Instant::now();
        assert_eq!(
            p.agent
                .wait_notification(Duration::from_millis(300), |_| false)
                .unwrap(),
            None
        );
        let slept = voluntary_switches() - before;
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
        assert!(slept <= 8, "{mode:?}: {slept} sleeps in a 300 ms idle wait");
        println!("{mode:?}: {slept} sleeps in a 300 ms idle wait");
        // Caller mode: nobody pumps P, so D's read moves only while P's wait drives it.
        let plan = plan_for(&d);
        pumping(&d.agent, || {
            let t = d
                .agent
                .post(&TransferParams::read(&plan, xfer::P_ENGINE, "ev-1").timeout(LONG))
                .unwrap();
            let n = wait_kind(&p.agent, NotificationKind::ReadDone, "ev-1");
            assert_eq!(n.engine_id, xfer::D_ENGINE);
            assert!(t.wait(Some(LONG)).unwrap());
        });
        xfer::verify(&plan, &d.memory).unwrap();
    }
}

/// A thread waiting while a peer disconnects gets PEER_LOST; the latency from the disconnect
/// call to the wait's return is printed (a measurement, not asserted: --nocapture shows it).
#[test]
fn a_peers_notification_wakes_a_waiting_thread() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    let d = node(false, Transport::Auto, ProgressMode::Thread);
    let mut latencies = Vec::new();
    for _ in 0..10 {
        let peer = d.agent.connect(&addr(&p), Some(LONG)).unwrap();
        p.agent
            .wait_notification(LONG, |n| n.kind == NotificationKind::PeerConnected)
            .unwrap()
            .expect("PEER_CONNECTED");
        p.agent.poll_notifications().unwrap();
        let (n, at, start) = std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let n = p
                    .agent
                    .wait_notification(LONG, |n| n.kind == NotificationKind::PeerLost)
                    .unwrap();
                (n, Instant::now())
            });
            // The waiter sleeps (the old naps had grown to 5 ms by now).
            std::thread::sleep(Duration::from_millis(50));
            let start = Instant::now();
            peer.disconnect().unwrap();
            let (n, at) = waiter.join().unwrap();
            (n, at, start)
        });
        assert_eq!(n.expect("PEER_LOST").engine_id, xfer::D_ENGINE);
        latencies.push(at - start);
    }
    latencies.sort();
    println!(
        "wait_notification PEER_LOST latency: median {:?}, max {:?} over {}",
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
        latencies.len()
    );
}

/// Waiter B sleeps on the event fd; waiter A (started later, so it waits on the condition
/// variable) wants only PEER_CONNECTED. B's take moves it into the shared queue and must wake A
/// at once, not when B's own wait ends; B then gets its PEER_LOST, and nothing else is lost.
#[test]
fn two_waiters_with_different_predicates() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    let d = node(false, Transport::Auto, ProgressMode::Thread);
    let wait = |kind: NotificationKind| {
        let n = p.agent.wait_notification(LONG, |n| n.kind == kind).unwrap();
        (n, Instant::now())
    };
    std::thread::scope(|s| {
        let b = s.spawn(|| wait(NotificationKind::PeerLost));
        // B's first look makes it the leader at once; this leaves it ample time.
        std::thread::sleep(Duration::from_millis(100));
        let a = s.spawn(|| wait(NotificationKind::PeerConnected));
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        let peer = d.agent.connect(&addr(&p), Some(LONG)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !a.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        // B's wait lasts until the disconnect below (or 10 s): A must not wait for it.
        assert!(a.is_finished(), "A was not woken by B's take");
        let (n, at) = a.join().unwrap();
        assert_eq!(
            n.expect("A's notification").kind,
            NotificationKind::PeerConnected
        );
        assert!(at - start < Duration::from_secs(2), "{:?}", at - start);
        assert!(!b.is_finished());
        peer.disconnect().unwrap();
        let (n, _) = b.join().unwrap();
        assert_eq!(
            n.expect("B's notification").kind,
            NotificationKind::PeerLost
        );
    });
    assert_eq!(p.agent.poll_notifications().unwrap(), Vec::new());
}

/// A predicate that panics in the waiter sleeping on the event fd gives the fd back: the next
/// wait still sleeps on it and gets its notification (it would wait on the condition variable
/// for ever otherwise).
#[test]
fn a_panicking_predicate_gives_the_event_fd_back() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    p.agent.lease("a", 1, Duration::from_millis(50)).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        p.agent.wait_notification(LONG, |_| panic!("predicate"))
    }));
    assert!(r.is_err());
    let left = p.agent.poll_notifications().unwrap();
    assert_eq!(left.len(), 1, "{left:?}"); // the notification it panicked on stays
    p.agent.lease("b", 1, Duration::from_millis(50)).unwrap();
    let start = Instant::now();
    let n = wait_kind(&p.agent, NotificationKind::LeaseExpired, "b");
    assert_eq!(n.request_id, "b");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

/// Runs `f` on a thread of its own and returns its result, panicking (instead of hanging the
/// run) when it has not returned in 5 s: what that thread holds is then never dropped.
fn returns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("hung (a predicate that calls back into the agent deadlocked)")
        }
        Err(e) => panic!("the call panicked: {e}"),
    }
}

/// The predicate runs without the queue's lock: one that calls poll_notifications gets the
/// notification (once) instead of deadlocking, and the wait, whose match that poll took, goes
/// on to its timeout; nothing is delivered twice.
#[test]
fn a_predicate_may_poll_the_agent() {
    let p = std::sync::Arc::new(node(true, Transport::Auto, ProgressMode::Thread));
    p.agent
        .lease("poll-a", 1, Duration::from_millis(10))
        .unwrap();
    let q = p.clone();
    let (got, polled) = returns(move || {
        let mut polled = Vec::new();
        let got = q
            .agent
            .wait_notification(Duration::from_millis(300), |n| {
                polled.extend(q.agent.poll_notifications().unwrap());
                n.request_id == "poll-a"
            })
            .unwrap();
        (got, polled)
    });
    assert_eq!(got, None);
    let polled: Vec<_> = polled.iter().map(|n| n.request_id.as_str()).collect();
    assert_eq!(polled, ["poll-a"]);
    assert!(p.agent.poll_notifications().unwrap().is_empty());
}

/// A predicate may run another wait on the same agent (even while its own wait is the one that
/// sleeps on the event fd): each returns its own notification. (A predicate cannot drop the
/// agent it borrows, so Rust has no close-from-a-predicate case.)
#[test]
fn a_predicate_may_wait_again() {
    let p = std::sync::Arc::new(node(true, Transport::Auto, ProgressMode::Thread));
    for r in ["outer", "inner"] {
        p.agent.lease(r, 1, Duration::from_millis(10)).unwrap();
    }
    let q = p.clone();
    let (outer, inner) = returns(move || {
        let mut inner = None;
        let outer = q
            .agent
            .wait_notification(LONG, |n| {
                if n.request_id != "outer" {
                    return false;
                }
                inner = q
                    .agent
                    .wait_notification(LONG, |m| m.request_id == "inner")
                    .unwrap();
                true
            })
            .unwrap();
        (outer, inner)
    });
    assert_eq!(outer.expect("outer").request_id, "outer");
    assert_eq!(inner.expect("inner").request_id, "inner");
    assert!(p.agent.poll_notifications().unwrap().is_empty());
}

/// Predicates run outside the lock, so several run at once and the queue changes under them:
/// still every waiter gets exactly its own notification, and a poller gets only the ones left,
/// so none is lost or delivered twice.
#[test]
fn many_waiters_with_slow_predicates_get_each_notification_once() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    let ids: Vec<String> = (0..8).map(|i| format!("many-{i}")).collect();
    let got: Vec<String> = std::thread::scope(|s| {
        let waiters: Vec<_> = ids
            .iter()
            .map(|id| {
                let agent = &p.agent;
                s.spawn(move || {
                    agent
                        .wait_notification(LONG, |n| {
                            // Widens the window in which the others change the queue.
                            std::thread::sleep(Duration::from_millis(1));
                            n.request_id == *id
                        })
                        .unwrap()
                        .expect("its notification")
                        .request_id
                })
            })
            .collect();
        for r in ids.iter().map(String::as_str).chain(["spare-1", "spare-2"]) {
            p.agent.lease(r, 1, Duration::from_millis(10)).unwrap();
        }
        waiters.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(got, ids);
    let mut spare = Vec::new();
    let deadline = Instant::now() + LONG;
    while spare.len() < 2 && Instant::now() < deadline {
        spare.extend(
            p.agent
                .poll_notifications()
                .unwrap()
                .into_iter()
                .map(|n| n.request_id),
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    spare.sort();
    assert_eq!(spare, ["spare-1", "spare-2"]);
}

/// A dropped registration's buffer stays allocated until the agent and its handles are gone,
/// even when its deregistration succeeded (a same-host peer told its address may still write
/// it), and the keep-alive list cannot grow past one buffer per region: a region is registered
/// only at its advertised base, which the kept buffer occupies, so register/drop cycles cannot
/// add to it.
#[test]
fn dropped_registrations_keep_one_buffer_per_region() {
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    let lens: Vec<usize> = p.memory.iter().map(|m| m.buffer().unwrap().len()).collect();
    drop(p.memory);
    assert_eq!(p.agent.kept_buffers(), lens.len());
    for _ in 0..100 {
        for (r, &len) in lens.iter().enumerate() {
            let e = p
                .agent
                .register_buffer(r as u32, HostBuffer::new(len).unwrap())
                .unwrap_err();
            assert_eq!(e.status(), Status::InvalidArgument, "{e}");
        }
    }
    assert_eq!(p.agent.kept_buffers(), lens.len());
}

/// While one wait sleeps on the event fd, another wait's look leaves the library's
/// notifications to it: a take there drained the event fd under the sleeping wait, which then
/// slept on (here until its 5 s timeout) with the notification only it wanted in the queue.
#[test]
fn a_wait_leaves_the_library_to_the_one_sleeping_on_the_event_fd() {
    use std::sync::mpsc;
    let p = node(true, Transport::Auto, ProgressMode::Thread);
    let (gated_tx, gated_rx) = mpsc::sync_channel::<()>(1);
    let (looked_tx, looked_rx) = mpsc::sync_channel::<()>(1);
    let looked_rx = std::sync::Mutex::new(Some(looked_rx));
    p.agent.set_before_sleep(move || {
        // The first sleeper polls once the other wait has looked (or after 1 s).
        if let Some(rx) = looked_rx.lock().unwrap().take() {
            gated_tx.send(()).unwrap();
            let _ = rx.recv_timeout(Duration::from_secs(1));
        }
    });
    std::thread::scope(|s| {
        let leader = s.spawn(|| {
            let n = p
                .agent
                .wait_notification(Duration::from_secs(5), |n| n.request_id == "for-leader")
                .unwrap();
            (n, Instant::now())
        });
        gated_rx.recv_timeout(LONG).unwrap();
        p.agent
            .lease("for-leader", 1, Duration::from_millis(10))
            .unwrap();
        let mut fd = PollFd {
            fd: p.agent.event_fd().unwrap(),
            events: 1,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the agent owns the descriptor and outlives the call.
        assert_eq!(unsafe { poll(&mut fd, 1, 10_000) }, 1, "no notification");
        let start = Instant::now();
        let follower = s.spawn(|| {
            p.agent
                .wait_notification(Duration::from_millis(500), |_| {
                    // It saw a notification: it took it from the library.
                    let _ = looked_tx.try_send(());
                    false
                })
                .unwrap()
        });
        let (n, at) = leader.join().unwrap();
        assert_eq!(n.expect("for-leader").request_id, "for-leader");
        assert!(at - start < Duration::from_secs(2), "{:?}", at - start);
        assert_eq!(follower.join().unwrap(), None);
    });
}

#[repr(C)]
struct PollFd {
    fd: std::os::raw::c_int,
    events: std::os::raw::c_short,
    revents: std::os::raw::c_short,
}

extern "C" {
    fn poll(
        fds: *mut PollFd,
        nfds: std::os::raw::c_ulong,
        timeout: std::os::raw::c_int,
    ) -> std::os::raw::c_int;
}
