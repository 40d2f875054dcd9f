//! widget-rust: the widget module's logic (modules/widget, in Go) on the
//! Rust SDK (guest-sdk/rust). It passes the Go widget's cases
//! (modules/widget/testdata/cases); `make modules-rust` builds it.
//!
//! status.observedGeneration is metadata.generation; status.summary is
//! "<size> x <color>" (defaults 1 and grey); condition Ready is True, or
//! False with reason InvalidSpec and a terminal error when spec.size is
//! outside 0..100.

use wasmreconcile::{export, log, Condition, Gvk, Level, Manifest, Request, Response, Value};

const MAX_SIZE: i64 = 100;

// Natively (the staticlib of BenchmarkRustGuestVsNative) only reconcile is
// called; export! uses the manifest in the wasm build.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn manifest() -> Manifest {
    Manifest::new("widget", Gvk::new("examples.wasmreconcile.io", "v1alpha1", "Widget"))
}

fn reconcile(req: &Request) -> Response {
    let obj = req.object();
    let gen = obj.path(&["metadata", "generation"]).as_i64().unwrap_or(0);
    let spec = obj.get("spec");
    let size = spec.get("size").as_i64().unwrap_or(1);
    let color = match spec.get("color").str_or_empty() {
        "" => "grey",
        c => c,
    };
    if !(0..=MAX_SIZE).contains(&size) {
        let msg = format!("spec.size {} is outside 0..{}; set spec.size within range", size, MAX_SIZE);
        let ready = Condition::new("Ready", "False", "InvalidSpec", &msg).generation(gen).for_object(obj, req.now());
        log(Level::Warn, &format!("{}/{}: {}", req.namespace(), req.name(), msg));
        return Response::new()
            .status(Value::object().with("observedGeneration", gen).with("summary", "invalid").with("conditions", vec![ready]))
            .terminal_error(&msg);
    }
    let message = format!("generation {} reconciled by widget v1", gen);
    let ready = Condition::new("Ready", "True", "Reconciled", &message).generation(gen).for_object(obj, req.now());
    Response::new().status(
        Value::object()
            .with("observedGeneration", gen)
            .with("summary", format!("{} x {}", size, color))
            .with("conditions", vec![ready]),
    )
}

export!(manifest, reconcile);

/// The same logic natively, for the native side of BenchmarkRustGuestVsNative
/// (modules/widget-rust/native, built as a staticlib): the response to
/// request [req, req+len) is written to [out, out+cap) when it fits; the
/// return value is its length either way, so a caller with too small a
/// buffer grows it and calls again.
///
/// # Safety
///
/// req must point to len readable bytes, and out to cap writable ones.
#[cfg(not(target_arch = "wasm32"))]
#[no_mangle]
pub unsafe extern "C" fn widget_rust_reconcile(req: *const u8, len: usize, out: *mut u8, cap: usize) -> usize {
    let input = std::slice::from_raw_parts(req, len);
    let resp = wasmreconcile::abi::respond(input, reconcile);
    if resp.len() <= cap {
        std::ptr::copy_nonoverlapping(resp.as_ptr(), out, resp.len());
    }
    resp.len()
}
