//! The wasmreconcile guest SDK for Rust: the ABI (docs/abi.md) behind a
//! request accessor, a response builder, logging and cache reads, with no
//! dependency but the standard library.
//!
//! A module is a `cdylib` for `wasm32-wasi` that names its manifest and
//! its reconcile function with [`export!`]:
//!
//! ```ignore
//! use wasmreconcile::{export, Gvk, Manifest, Request, Response, Value};
//!
//! fn manifest() -> Manifest {
//!     Manifest::new("hello", Gvk::new("examples.wasmreconcile.io", "v1alpha1", "Widget"))
//! }
//!
//! fn reconcile(req: &Request) -> Response {
//!     let size = req.object().path(&["spec", "size"]).as_i64().unwrap_or(0);
//!     Response::new().status(Value::object().with("size", size))
//! }
//!
//! export!(manifest, reconcile);
//! ```
//!
//! Build with Debian's rustc (`apt-get install rustc libstd-rust-dev-wasm32`):
//!
//! ```text
//! rustc --edition 2021 --crate-type rlib --target wasm32-wasi -C opt-level=s -C panic=abort -C target-feature=+bulk-memory \
//!   --crate-name wasmreconcile -o libwasmreconcile.rlib guest-sdk/rust/src/lib.rs
//! rustc --edition 2021 --crate-type cdylib --target wasm32-wasi -C opt-level=s -C panic=abort -C target-feature=+bulk-memory \
//!   -C lto -C strip=symbols -C codegen-units=1 --extern wasmreconcile=libwasmreconcile.rlib \
//!   -o module.wasm module.rs
//! ```
//!
//! Use the standard library (`no_std` on wasm32-wasi imports `env.memcpy`,
//! which the host refuses). Stable rustc has no reactor mode: [`export!`]
//! exports `_initialize` itself.

pub mod alloc;
pub mod json;

pub use json::Value;

use std::cell::RefCell;

/// The ABI version this SDK speaks: the module exports `wr_abi_v1`.
pub const ABI_VERSION: &str = "v1";

/// A group, version and kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    pub fn new(group: &str, version: &str, kind: &str) -> Gvk {
        Gvk { group: group.into(), version: version.into(), kind: kind.into() }
    }

    fn to_value(&self) -> Value {
        Value::object().with("group", self.group.as_str()).with("version", self.version.as_str()).with("kind", self.kind.as_str())
    }
}

/// How a change of a related object maps to the objects to reconcile
/// (docs/abi.md, "Related-object triggers").
#[derive(Clone, Debug, PartialEq)]
pub enum TriggerMapping {
    /// The related object's controller owner reference.
    OwnerReference,
    /// Objects whose field (a dot-separated path such as spec.configMap)
    /// names the related object.
    Field(String),
    /// Objects whose label selector at this path selects it.
    Selector(String),
    /// Every object of the module's kind in its namespace.
    All,
}

/// A module's manifest: its name and the kinds it reconciles, owns and
/// reads (docs/abi.md, "Manifest").
#[derive(Clone, Debug)]
pub struct Manifest {
    name: String,
    for_: Gvk,
    owns: Vec<Gvk>,
    reads: Vec<Gvk>,
    triggers: Vec<(Gvk, TriggerMapping)>,
    finalizer: bool,
}

impl Manifest {
    /// A manifest for module name reconciling objects of kind for_.
    pub fn new(name: &str, for_: Gvk) -> Manifest {
        Manifest { name: name.into(), for_, owns: vec![], reads: vec![], triggers: vec![], finalizer: false }
    }

    /// Declares a kind of children the module writes.
    pub fn owns(mut self, g: Gvk) -> Manifest {
        self.owns.push(g);
        self
    }

    /// Declares a kind the module reads with cache reads.
    pub fn reads(mut self, g: Gvk) -> Manifest {
        self.reads.push(g);
        self
    }

    /// Declares that changes of kind (which must be read) reconcile the
    /// objects m maps them to.
    pub fn trigger(mut self, kind: Gvk, m: TriggerMapping) -> Manifest {
        self.triggers.push((kind, m));
        self
    }

    /// Declares the module's finalizer: deleted objects are reconciled with
    /// finalizing set until the response says finalized.
    pub fn finalizer(mut self) -> Manifest {
        self.finalizer = true;
        self
    }

    /// The manifest as JSON.
    pub fn to_json(&self) -> String {
        let list = |gs: &[Gvk]| Value::Array(gs.iter().map(Gvk::to_value).collect());
        let mut m = Value::object().with("name", self.name.as_str()).with("for", self.for_.to_value());
        if !self.owns.is_empty() {
            m.set("owns", list(&self.owns));
        }
        if !self.reads.is_empty() {
            m.set("reads", list(&self.reads));
        }
        if !self.triggers.is_empty() {
            let ts = self
                .triggers
                .iter()
                .map(|(g, t)| {
                    let v = Value::object().with("kind", g.to_value());
                    match t {
                        TriggerMapping::OwnerReference => v.with("ownerReference", true),
                        TriggerMapping::Field(p) => v.with("field", p.as_str()),
                        TriggerMapping::Selector(p) => v.with("selector", p.as_str()),
                        TriggerMapping::All => v.with("all", true),
                    }
                })
                .collect();
            m.set("triggers", Value::Array(ts));
        }
        if self.finalizer {
            m.set("finalizer", true);
        }
        m.to_json()
    }
}

/// A desired child the host could not write in the previous reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildFailure {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// Conflict, or the API server's reason (Invalid, Forbidden, …).
    pub reason: String,
    pub message: String,
}

/// One reconcile's request (docs/abi.md, "Request").
#[derive(Clone, Debug)]
pub struct Request {
    doc: Value,
}

impl Request {
    /// Parses a request document.
    pub fn parse(b: &[u8]) -> Result<Request, json::ParseError> {
        Ok(Request { doc: Value::parse(b)? })
    }

    /// The whole request document.
    pub fn document(&self) -> &Value {
        &self.doc
    }

    /// The object to reconcile.
    pub fn object(&self) -> &Value {
        self.doc.get("object")
    }

    /// The object's metadata.name.
    pub fn name(&self) -> &str {
        self.object().path(&["metadata", "name"]).str_or_empty()
    }

    /// The object's metadata.namespace ("" when cluster-scoped).
    pub fn namespace(&self) -> &str {
        self.object().path(&["metadata", "namespace"]).str_or_empty()
    }

    /// The string at a path of the object, such as ["spec", "op"]; "" when
    /// missing or not a string.
    pub fn str_at(&self, path: &[&str]) -> &str {
        self.object().path(path).str_or_empty()
    }

    /// The module's observed children.
    pub fn children(&self) -> &[Value] {
        self.doc.get("children").items()
    }

    /// The related objects passed along (offline only).
    pub fn related(&self) -> &[Value] {
        self.doc.get("related").items()
    }

    /// The observed child of kind and name, if there is one.
    pub fn child(&self, kind: &str, name: &str) -> Option<&Value> {
        self.children().iter().find(|c| c.get("kind").as_str() == Some(kind) && c.path(&["metadata", "name"]).as_str() == Some(name))
    }

    /// The object is being deleted and the module declared a finalizer.
    pub fn finalizing(&self) -> bool {
        self.doc.get("finalizing").as_bool().unwrap_or(false)
    }

    /// The module's configuration; Null when there is none.
    pub fn config(&self) -> &Value {
        self.doc.get("config")
    }

    /// Consecutive failed reconciles of this object before this one.
    pub fn attempt(&self) -> i64 {
        self.doc.get("attempt").as_i64().unwrap_or(0)
    }

    /// The host's clock, RFC 3339, to the second.
    pub fn now(&self) -> &str {
        self.doc.get("now").str_or_empty()
    }

    /// The desired children the host could not write last time.
    pub fn child_failures(&self) -> Vec<ChildFailure> {
        self.doc
            .get("childFailures")
            .items()
            .iter()
            .map(|f| ChildFailure {
                api_version: f.get("apiVersion").str_or_empty().into(),
                kind: f.get("kind").str_or_empty().into(),
                namespace: f.get("namespace").str_or_empty().into(),
                name: f.get("name").str_or_empty().into(),
                reason: f.get("reason").str_or_empty().into(),
                message: f.get("message").str_or_empty().into(),
            })
            .collect()
    }
}

/// A status condition, as metav1.Condition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Condition {
    pub type_: String,
    /// "True", "False" or "Unknown".
    pub status: String,
    pub reason: String,
    pub message: String,
    /// The generation the condition was computed from; 0 leaves it out.
    pub observed_generation: i64,
}

impl Condition {
    pub fn new(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition { type_: type_.into(), status: status.into(), reason: reason.into(), message: message.into(), observed_generation: 0 }
    }

    /// Sets the generation the condition was computed from.
    pub fn generation(mut self, g: i64) -> Condition {
        self.observed_generation = g;
        self
    }

    /// The condition to write for object obj at time now, with
    /// controller-runtime's meta.SetStatusCondition semantics: its
    /// lastTransitionTime is now, unless obj's condition of the same type
    /// has the same status, whose time is kept (so an unchanged condition
    /// writes nothing).
    pub fn for_object(&self, obj: &Value, now: &str) -> Value {
        let old = obj.path(&["status", "conditions"]).items().iter().find(|c| c.get("type").as_str() == Some(self.type_.as_str()));
        let mut time = now;
        if let Some(old) = old {
            let kept = old.get("lastTransitionTime").str_or_empty();
            if old.get("status").as_str() == Some(self.status.as_str()) && !kept.is_empty() {
                time = kept;
            }
        }
        let mut c = Value::object()
            .with("type", self.type_.as_str())
            .with("status", self.status.as_str())
            .with("lastTransitionTime", time)
            .with("reason", self.reason.as_str())
            .with("message", self.message.as_str());
        if self.observed_generation != 0 {
            c.set("observedGeneration", self.observed_generation);
        }
        c
    }
}

/// An Event to record on the object.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub type_: String,
    pub reason: String,
    pub message: String,
}

impl Event {
    pub fn normal(reason: &str, message: &str) -> Event {
        Event { type_: "Normal".into(), reason: reason.into(), message: message.into() }
    }
    pub fn warning(reason: &str, message: &str) -> Event {
        Event { type_: "Warning".into(), reason: reason.into(), message: message.into() }
    }
}

/// A reconcile's answer (docs/abi.md, "Response"), built field by field.
/// Fields left unset are absent: no status leaves the status alone, and no
/// children leaves the children alone, whereas [`Response::no_children`]
/// deletes them all.
#[derive(Clone, Debug, Default)]
pub struct Response {
    raw: Option<Value>,
    status: Option<Value>,
    children: Option<Vec<Value>>,
    events: Vec<Event>,
    requeue_after_seconds: i64,
    error: Option<(String, bool)>,
    finalized: bool,
}

impl Response {
    pub fn new() -> Response {
        Response::default()
    }

    /// A response given whole as a document, written as it is: the host
    /// checks it like any other (docs/abi.md, "Response rules").
    pub fn raw(doc: Value) -> Response {
        Response { raw: Some(doc), ..Response::default() }
    }

    /// The status to write.
    pub fn status(mut self, status: Value) -> Response {
        self.status = Some(status);
        self
    }

    /// Adds a desired child (an object with apiVersion, kind and
    /// metadata.name; the host sets its namespace, owner and label).
    pub fn child(mut self, child: Value) -> Response {
        self.children.get_or_insert_with(Vec::new).push(child);
        self
    }

    /// Declares that the module wants no children: every child is deleted.
    pub fn no_children(mut self) -> Response {
        self.children = Some(Vec::new());
        self
    }

    pub fn event(mut self, e: Event) -> Response {
        self.events.push(e);
        self
    }

    /// Asks to be called again after secs seconds.
    pub fn requeue_after(mut self, secs: i64) -> Response {
        self.requeue_after_seconds = secs;
        self
    }

    /// A failure, retried with backoff.
    pub fn error(mut self, message: &str) -> Response {
        self.error = Some((message.into(), false));
        self
    }

    /// A failure not retried until the object changes.
    pub fn terminal_error(mut self, message: &str) -> Response {
        self.error = Some((message.into(), true));
        self
    }

    /// Declares finalization done: the host removes the finalizer.
    pub fn finalized(mut self) -> Response {
        self.finalized = true;
        self
    }

    /// The response as JSON.
    pub fn to_json(&self) -> String {
        if let Some(doc) = &self.raw {
            return doc.to_json();
        }
        let mut v = Value::object();
        if let Some(s) = &self.status {
            v.set("status", s);
        }
        if let Some(c) = &self.children {
            v.set("children", Value::Array(c.clone()));
        }
        if !self.events.is_empty() {
            let es = self
                .events
                .iter()
                .map(|e| Value::object().with("type", e.type_.as_str()).with("reason", e.reason.as_str()).with("message", e.message.as_str()))
                .collect();
            v.set("events", Value::Array(es));
        }
        if self.requeue_after_seconds != 0 {
            v.set("requeueAfterSeconds", self.requeue_after_seconds);
        }
        if let Some((m, terminal)) = &self.error {
            let mut e = Value::object().with("message", m.as_str());
            if *terminal {
                e.set("terminal", true);
            }
            v.set("error", e);
        }
        if self.finalized {
            v.set("finalized", true);
        }
        v.to_json()
    }
}

/// Log levels of the host's log function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Level {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

/// Writes one line to the operator's log, tagged with the module and the
/// object; over the call's log budget it is dropped and counted.
pub fn log(level: Level, msg: &str) {
    host::log(level as i32, msg.as_bytes());
}

/// Why a cache read failed (docs/abi.md, "cache_read").
#[derive(Clone, Debug, PartialEq)]
pub enum CacheError {
    /// The kind or namespace is not the module's to read.
    Forbidden(String),
    BadRequest(String),
    Unavailable(String),
    Other(String),
}

impl std::fmt::Display for CacheError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheError::Forbidden(m) => write!(f, "cache read forbidden: {}", m),
            CacheError::BadRequest(m) => write!(f, "cache read refused: {}", m),
            CacheError::Unavailable(m) => write!(f, "cache unavailable: {}", m),
            CacheError::Other(m) => write!(f, "cache read failed: {}", m),
        }
    }
}

thread_local! {
    // The buffer cache reads land in, grown when a result does not fit.
    static CACHE_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; 64 << 10]);
}

fn cache_read(req: &Value) -> Result<Option<Value>, CacheError> {
    let req = req.to_json();
    CACHE_BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        loop {
            let packed = host::cache_read(req.as_bytes(), &mut buf);
            let (status, n) = ((packed >> 32) as u32, (packed & 0xffff_ffff) as usize);
            if n > buf.len() {
                buf.resize(n, 0); // too small: grow and ask again
                continue;
            }
            let out = &buf[..n];
            let msg = || String::from_utf8_lossy(out).into_owned();
            return match status {
                0 => Value::parse(out).map(Some).map_err(|e| CacheError::Other(e.to_string())),
                1 => Ok(None),
                2 => Err(CacheError::Forbidden(msg())),
                3 => Err(CacheError::BadRequest(msg())),
                4 => Err(CacheError::Unavailable(msg())),
                _ => Err(CacheError::Other(msg())),
            };
        }
    })
}

/// Reads an object from the host's cache; None when it does not exist.
pub fn get(api_version: &str, kind: &str, namespace: &str, name: &str) -> Result<Option<Value>, CacheError> {
    cache_read(&Value::object().with("op", "get").with("apiVersion", api_version).with("kind", kind).with("namespace", namespace).with("name", name))
}

/// Lists objects from the host's cache, in namespace ("" for every
/// namespace, if granted) matching a label selector ("" for all).
pub fn list(api_version: &str, kind: &str, namespace: &str, selector: &str) -> Result<Vec<Value>, CacheError> {
    let mut req = Value::object().with("op", "list").with("apiVersion", api_version).with("kind", kind).with("namespace", namespace);
    if !selector.is_empty() {
        req.set("labelSelector", selector);
    }
    match cache_read(&req)? {
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(CacheError::Other("list answered something other than an array".into())),
        None => Ok(Vec::new()),
    }
}

/// The host functions; outside wasm they log to stderr and find nothing, so
/// that a module's logic can be tested natively.
mod host {
    #[cfg(target_arch = "wasm32")]
    #[link(wasm_import_module = "wasmreconcile")]
    extern "C" {
        #[link_name = "log"]
        fn wr_log(level: i32, ptr: *const u8, len: u32);
        #[link_name = "cache_read"]
        fn wr_cache_read(req: *const u8, req_len: u32, buf: *mut u8, buf_limit: u32) -> u64;
    }

    #[cfg(target_arch = "wasm32")]
    pub fn log(level: i32, msg: &[u8]) {
        unsafe { wr_log(level, msg.as_ptr(), msg.len() as u32) }
    }

    #[cfg(target_arch = "wasm32")]
    pub fn cache_read(req: &[u8], buf: &mut [u8]) -> u64 {
        unsafe { wr_cache_read(req.as_ptr(), req.len() as u32, buf.as_mut_ptr(), buf.len() as u32) }
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub fn log(level: i32, msg: &[u8]) {
        eprintln!("guest log {}: {}", level, String::from_utf8_lossy(msg));
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub fn cache_read(_req: &[u8], buf: &mut [u8]) -> u64 {
        let msg = b"no cache outside wasm";
        let n = msg.len().min(buf.len());
        buf[..n].copy_from_slice(&msg[..n]);
        (4u64 << 32) | n as u64 // CacheUnavailable
    }
}

/// What [`export!`] expands to; not for direct use.
#[doc(hidden)]
pub mod abi {
    use super::{Manifest, Request, Response};
    use std::cell::RefCell;

    thread_local! {
        static MANIFEST: RefCell<Vec<u8>> = RefCell::new(Vec::new());
        /// The buffer requests are written to, kept across calls up to
        /// KEEP_IN bytes, so a call does not allocate for its request.
        static IN: RefCell<Vec<u8>> = RefCell::new(Vec::new());
        static OUT: RefCell<Vec<u8>> = RefCell::new(Vec::new());
    }

    /// The largest request buffer kept for the next call; a larger one is
    /// freed when its call ends.
    const KEEP_IN: usize = 64 << 10;

    pub fn pack(p: *const u8, n: usize) -> u64 {
        ((p as usize as u64) << 32) | n as u64
    }

    /// wr_alloc: size bytes for the next request, valid until the call
    /// that reads them ends.
    pub fn alloc(size: u32) -> *mut u8 {
        IN.with(|b| {
            let mut b = b.borrow_mut();
            let size = (size as usize).max(1);
            if b.capacity() < size {
                *b = Vec::with_capacity(size); // nothing in it to keep
            }
            b.as_mut_ptr()
        })
    }

    pub fn manifest(m: fn() -> Manifest) -> u64 {
        MANIFEST.with(|b| {
            let mut b = b.borrow_mut();
            *b = m().to_json().into_bytes();
            pack(b.as_ptr(), b.len())
        })
    }

    /// wr_reconcile: decodes the request at ptr (in the buffer alloc
    /// gave, which the host filled), calls f, and returns its encoded
    /// response, which stays valid until the next call.
    pub fn reconcile(ptr: *mut u8, len: u32, f: fn(&Request) -> Response) -> u64 {
        let len = len as usize;
        let input: &[u8] = if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(ptr, len) } };
        let out = respond(input, f);
        IN.with(|b| {
            let mut b = b.borrow_mut();
            if b.capacity() > KEEP_IN {
                *b = Vec::new();
            }
        });
        OUT.with(|b| {
            let mut b = b.borrow_mut();
            *b = out.into_bytes();
            pack(b.as_ptr(), b.len())
        })
    }

    #[cfg(test)]
    pub(crate) fn in_capacity() -> usize {
        IN.with(|b| b.borrow().capacity())
    }

    /// The response document to request document input: f's answer, or a
    /// terminal error when input is not a request.
    pub fn respond(input: &[u8], f: fn(&Request) -> Response) -> String {
        match Request::parse(input) {
            Ok(req) => f(&req),
            Err(e) => Response::new().terminal_error(&format!("guest: decoding the request: {}", e)),
        }
        .to_json()
    }
}

/// Exports the ABI of a module whose manifest comes from $manifest (a
/// `fn() -> Manifest`) and whose reconcile is $reconcile (a
/// `fn(&Request) -> Response`).
#[macro_export]
macro_rules! export {
    ($manifest:ident, $reconcile:ident) => {
        #[cfg(target_arch = "wasm32")]
        mod __wasmreconcile_exports {
            extern "C" {
                fn __wasm_call_ctors();
            }
            #[no_mangle]
            pub extern "C" fn _initialize() {
                unsafe { __wasm_call_ctors() }
            }
            #[no_mangle]
            pub extern "C" fn wr_abi_v1() {}
            #[no_mangle]
            pub extern "C" fn wr_alloc(size: u32) -> *mut u8 {
                $crate::abi::alloc(size)
            }
            #[no_mangle]
            pub extern "C" fn wr_manifest() -> u64 {
                $crate::abi::manifest(super::$manifest)
            }
            #[no_mangle]
            pub extern "C" fn wr_reconcile(ptr: *mut u8, len: u32) -> u64 {
                $crate::abi::reconcile(ptr, len, super::$reconcile)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call writes its request into the buffer of the last one when it
    /// fits; a buffer past KEEP_IN is freed when its call ends.
    #[test]
    fn the_request_buffer_is_reused_and_a_large_one_freed() {
        fn name(req: &Request) -> Response {
            Response::new().status(Value::object().with("name", req.name()))
        }
        let call = |doc: &[u8]| {
            let p = abi::alloc(doc.len() as u32);
            unsafe { std::ptr::copy_nonoverlapping(doc.as_ptr(), p, doc.len()) };
            let packed = abi::reconcile(p, doc.len() as u32, name);
            assert_eq!(packed as u32 as usize, abi::respond(doc, name).len(), "the response's length");
            p
        };
        let small = br#"{"object":{"metadata":{"name":"a"}}}"#;
        let first = call(small);
        assert_eq!(call(&small[..]), first, "the second request did not reuse the buffer");
        assert!(abi::in_capacity() >= small.len());
        let mut large = small.to_vec();
        large.resize(100 << 10, b' ');
        call(&large);
        assert_eq!(abi::in_capacity(), 0, "a 100 KiB request buffer was kept");
        assert_eq!(abi::respond(&large, name), r#"{"status":{"name":"a"}}"#);
    }

    #[test]
    fn response_fields_are_absent_unless_set() {
        assert_eq!(Response::new().to_json(), "{}");
        assert_eq!(Response::new().no_children().to_json(), r#"{"children":[]}"#);
        let r = Response::new()
            .status(Value::object().with("phase", "ok"))
            .child(Value::object().with("kind", "ConfigMap"))
            .event(Event::warning("Why", "because"))
            .requeue_after(30)
            .terminal_error("no")
            .finalized();
        assert_eq!(
            r.to_json(),
            r#"{"status":{"phase":"ok"},"children":[{"kind":"ConfigMap"}],"events":[{"type":"Warning","reason":"Why","message":"because"}],"requeueAfterSeconds":30,"error":{"message":"no","terminal":true},"finalized":true}"#
        );
        assert_eq!(Response::new().error("later").to_json(), r#"{"error":{"message":"later"}}"#);
        assert_eq!(Response::raw(Value::object().with("x", 1)).status(Value::Null).to_json(), r#"{"x":1}"#);
    }

    #[test]
    fn manifest_declares_every_field() {
        let m = Manifest::new("m", Gvk::new("g", "v1", "K"))
            .owns(Gvk::new("", "v1", "ConfigMap"))
            .reads(Gvk::new("", "v1", "Secret"))
            .trigger(Gvk::new("", "v1", "Secret"), TriggerMapping::Field("spec.secret".into()))
            .trigger(Gvk::new("", "v1", "Secret"), TriggerMapping::All)
            .finalizer();
        assert_eq!(
            m.to_json(),
            r#"{"name":"m","for":{"group":"g","version":"v1","kind":"K"},"owns":[{"group":"","version":"v1","kind":"ConfigMap"}],"reads":[{"group":"","version":"v1","kind":"Secret"}],"triggers":[{"kind":{"group":"","version":"v1","kind":"Secret"},"field":"spec.secret"},{"kind":{"group":"","version":"v1","kind":"Secret"},"all":true}],"finalizer":true}"#
        );
        assert_eq!(Manifest::new("m", Gvk::new("g", "v1", "K")).to_json(), r#"{"name":"m","for":{"group":"g","version":"v1","kind":"K"}}"#);
    }

    #[test]
    fn request_accessors() {
        let req = Request::parse(
            br#"{"object":{"metadata":{"name":"w","namespace":"ns"},"spec":{"op":"x"}},"attempt":2,"now":"2026-01-01T00:00:00Z","finalizing":true,
            "children":[{"kind":"ConfigMap","metadata":{"name":"a"}}],"childFailures":[{"apiVersion":"v1","kind":"ConfigMap","namespace":"ns","name":"b","reason":"Conflict","message":"taken"}]}"#,
        )
        .unwrap();
        assert_eq!((req.name(), req.namespace(), req.str_at(&["spec", "op"])), ("w", "ns", "x"));
        assert_eq!((req.attempt(), req.now(), req.finalizing()), (2, "2026-01-01T00:00:00Z", true));
        assert!(req.child("ConfigMap", "a").is_some() && req.child("ConfigMap", "b").is_none() && req.child("Secret", "a").is_none());
        assert_eq!(req.child_failures()[0].reason, "Conflict");
        assert!(req.config().is_null() && req.related().is_empty());
        let empty = Request::parse(b"{}").unwrap();
        assert_eq!((empty.name(), empty.attempt(), empty.finalizing()), ("", 0, false));
    }

    #[test]
    fn bad_request_is_a_terminal_error() {
        assert_eq!(abi::respond(b"{}", |_| Response::new().status(Value::object())), r#"{"status":{}}"#);
        let out = abi::respond(b"", |_| Response::new());
        let v = Value::parse(out.as_bytes()).unwrap();
        assert_eq!(v.path(&["error", "terminal"]).as_bool(), Some(true));
        assert!(v.path(&["error", "message"]).str_or_empty().starts_with("guest: decoding the request: json: offset 0"));
    }

    #[test]
    fn condition_keeps_its_time_while_its_status_holds() {
        let obj = Value::parse(br#"{"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"}]}}"#).unwrap();
        let now = "2026-01-01T00:00:00Z";
        let same = Condition::new("Ready", "True", "Ok", "fine").generation(3).for_object(&obj, now);
        assert_eq!(same.to_json(), r#"{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"Ok","message":"fine","observedGeneration":3}"#);
        let flipped = Condition::new("Ready", "False", "Bad", "no").for_object(&obj, now);
        assert_eq!(flipped.get("lastTransitionTime").as_str(), Some(now));
        assert_eq!(Condition::new("Other", "True", "", "").for_object(&obj, now).get("lastTransitionTime").as_str(), Some(now));
        assert!(flipped.get("observedGeneration").is_null());
    }

    #[test]
    fn cache_reads_outside_wasm_are_unavailable() {
        assert!(matches!(get("v1", "Secret", "ns", "x"), Err(CacheError::Unavailable(_))));
        assert!(matches!(list("v1", "Secret", "ns", ""), Err(CacheError::Unavailable(_))));
    }
}
