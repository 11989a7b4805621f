//! Moves one request's KV cache from a P (prefill) rank to a D (decode) rank with the transfer
//! executor, and checks every byte. See `xfer_setup/mod.rs` for the setup all languages share.
//!
//! Usage (`cargo run --example transfer -- [options]`):
//! * no role (or `--role both`): both ranks in this process;
//! * `--role p [--transport auto|shm|tcp]`: a P rank alone; prints `LISTEN <host:port>`, then
//!   waits (leased) until a D rank has read the request, and exits 0;
//! * `--role d --connect <host:port>`: a D rank alone; connects, reads, verifies byte by byte,
//!   prints `VERIFIED <bytes>` and exits 0.
//!
//! Options: `--request <id>` (default "req-1"), `--timeout-s <s>` (default 20). Any failure
//! prints the error and exits 1.
#[path = "xfer_setup/mod.rs"]
mod xfer;

use pdkv::*;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

struct Args {
    role: String,
    connect: Option<String>,
    transport: Transport,
    request: String,
    timeout: Duration,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        role: "both".into(),
        connect: None,
        transport: Transport::Auto,
        request: "req-1".into(),
        timeout: Duration::from_secs(20),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--role" => a.role = value()?,
            "--connect" => a.connect = Some(value()?),
            "--request" => a.request = value()?,
            "--timeout-s" => {
                let v = value()?;
                a.timeout =
                    Duration::from_secs(v.parse().map_err(|_| format!("bad --timeout-s {v}"))?)
            }
            "--transport" => {
                a.transport = match value()?.as_str() {
                    "auto" => Transport::Auto,
                    "shm" => Transport::Shm,
                    "tcp" => Transport::Tcp,
                    other => return Err(format!("unknown transport {other}")),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

type AnyResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The P rank: lease the request (one READ_DONE expected), then wait for it to complete.
fn p_wait(p: &Agent, request: &str, timeout: Duration) -> AnyResult<()> {
    let n = p
        .wait_notification(timeout, |n| {
            n.request_id == request
                && matches!(
                    n.kind,
                    NotificationKind::RequestComplete | NotificationKind::LeaseExpired
                )
        })?
        .ok_or("no notification for the request before the timeout")?;
    if n.kind != NotificationKind::RequestComplete {
        return Err(format!("request {request}: {:?}", n.kind).into());
    }
    Ok(())
}

/// The D rank: plan from the peer's metadata, read, verify.
fn d_read(d: &xfer::Node, request: &str, timeout: Duration) -> AnyResult<u64> {
    // A D rank keeps P's lease of a request open until it reads it (a real engine does this
    // periodically for requests queued behind others, as vLLM's "HB:" notifications do).
    d.agent.keep_leases(xfer::P_ENGINE, &[request])?;
    let p_meta = d.agent.find_peer(xfer::P_ENGINE, 0)?.metadata()?;
    let plan = xfer::plan(&d.metadata, &p_meta)?;
    let t = d
        .agent
        .post(&TransferParams::read(&plan, xfer::P_ENGINE, request).timeout(timeout))?;
    if !t.wait(None)? {
        return Err("transfer still in flight after an unbounded wait".into());
    }
    let info = t.info()?;
    println!(
        "D: read {} bytes in {} operations ({:?})",
        info.bytes_done, info.operations_done, info.elapsed
    );
    Ok(xfer::verify(&plan, &d.memory)?)
}

fn run(a: &Args) -> AnyResult<()> {
    let model = xfer::model()?;
    let node = |prefill| xfer::node(&model, prefill, a.transport, ProgressMode::Thread);
    match a.role.as_str() {
        "p" => {
            let p = node(true)?;
            p.agent.lease(&a.request, 1, a.timeout)?;
            println!("LISTEN {}", p.agent.info()?.listen_address);
            std::io::stdout().flush()?;
            p_wait(&p.agent, &a.request, a.timeout)?;
            println!("P: request {} read by D", a.request);
        }
        "d" => {
            let addr = a.connect.as_deref().ok_or("--role d needs --connect")?;
            let d = node(false)?;
            d.agent.connect(addr, Some(a.timeout))?;
            let bytes = d_read(&d, &a.request, a.timeout)?;
            println!("VERIFIED {bytes}");
        }
        "both" => {
            let p = node(true)?;
            let d = node(false)?;
            p.agent.lease(&a.request, 1, a.timeout)?;
            let peer = d
                .agent
                .connect(&p.agent.info()?.listen_address, Some(a.timeout))?;
            let pi = peer.info()?;
            println!("D connected to {} over {:?}", pi.address, pi.transport);
            let bytes = d_read(&d, &a.request, a.timeout)?;
            p_wait(&p.agent, &a.request, a.timeout)?;
            println!("VERIFIED {bytes}; P saw the request complete");
        }
        other => return Err(format!("unknown role {other}").into()),
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("transfer: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("transfer ({}): {e}", args.role);
            ExitCode::FAILURE
        }
    }
}
