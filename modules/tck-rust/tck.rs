//! tck-rust: the wasmreconcile conformance guest in Rust, on the Rust SDK
//! (guest-sdk/rust). It implements the same ops as modules/internal/tck (Go)
//! and modules/tck-c (C), and must pass the same cases in
//! modules/internal/tck/testdata/cases. `make modules-rust` builds it.

use wasmreconcile::{export, get, list, log, CacheError, Event, Gvk, Level, Manifest, Request, Response, TriggerMapping, Value};

fn manifest() -> Manifest {
    Manifest::new("tck-rust", Gvk::new("tck.wasmreconcile.io", "v1", "Probe"))
        .owns(Gvk::new("", "v1", "ConfigMap"))
        .owns(Gvk::new("", "v1", "Service"))
        .reads(Gvk::new("", "v1", "Secret"))
        .trigger(Gvk::new("", "v1", "Secret"), TriggerMapping::Field("spec.secretName".into()))
        .finalizer()
}

/// "Kind/name" of each object, sorted.
fn names(objs: &[Value]) -> Value {
    let mut out: Vec<String> = objs.iter().map(|o| format!("{}/{}", o.get("kind").str_or_empty(), o.path(&["metadata", "name"]).str_or_empty())).collect();
    out.sort();
    Value::Array(out.into_iter().map(Value::from).collect())
}

fn err_string<T>(r: &Result<T, CacheError>) -> &'static str {
    if r.is_err() {
        "error"
    } else {
        ""
    }
}

fn reconcile(req: &Request) -> Response {
    let ns = req.namespace();
    match req.str_at(&["spec", "op"]) {
        "emit" => Response::raw(req.object().path(&["spec", "response"]).clone()),
        "echo" => {
            let cfg = if req.config().is_null() { Value::object() } else { req.config().clone() };
            let mut failures: Vec<String> = req.child_failures().iter().map(|f| format!("{}/{}:{}", f.kind, f.name, f.reason)).collect();
            failures.sort();
            Response::new().status(
                Value::object()
                    .with("attempt", req.attempt())
                    .with("now", req.now())
                    .with("finalizing", req.finalizing())
                    .with("config", cfg)
                    .with("children", names(req.children()))
                    .with("related", names(req.related()))
                    .with("childFailures", Value::Array(failures.into_iter().map(Value::from).collect())),
            )
        }
        "statusonly" => Response::new().status(Value::object().with("phase", "statusonly")),
        "prune" => Response::new().status(Value::object().with("phase", "prune")).no_children(),
        "log" => {
            log(Level::Debug, "tck debug line");
            log(Level::Info, "tck info line");
            log(Level::Warn, "tck warn line");
            log(Level::Error, "tck error line");
            Response::new().status(Value::object().with("logged", 4))
        }
        "read" => {
            let mut st = Value::object();
            let got = get("v1", "Secret", ns, "creds");
            st.set("getFound", matches!(got, Ok(Some(_))));
            st.set("getErr", err_string(&got));
            if let Ok(Some(s)) = &got {
                st.set("getName", s.path(&["metadata", "name"]));
            }
            let missing = get("v1", "Secret", ns, "missing");
            st.set("missingFound", matches!(missing, Ok(Some(_))));
            st.set("missingErr", err_string(&missing));
            let listed = list("v1", "Secret", ns, "tier=backend");
            st.set("listed", listed.as_ref().map(|l| l.len()).unwrap_or(0));
            st.set("listErr", err_string(&listed));
            let all = list("v1", "Secret", "", "");
            st.set("listedAll", all.as_ref().map(|l| l.len()).unwrap_or(0));
            st.set("listAllErr", err_string(&all));
            st.set("otherNamespaceForbidden", matches!(get("v1", "Secret", "other-ns", "elsewhere"), Err(CacheError::Forbidden(_))));
            st.set("podForbidden", matches!(get("v1", "Pod", ns, "p"), Err(CacheError::Forbidden(_))));
            st.set("badSelectorRefused", list("v1", "Secret", ns, "tier in (").is_err());
            Response::new().status(st)
        }
        "readbig" => match list("v1", "Secret", ns, "") {
            Err(e) => Response::new().error(&format!("list: {}", e)),
            Ok(items) => {
                let total: usize = items.iter().map(|o| o.path(&["data", "blob"]).str_or_empty().len()).sum();
                Response::new().status(Value::object().with("listed", items.len()).with("bytes", total))
            }
        },
        "children" => {
            let labels = Value::object().with("tck", "yes");
            let meta = |suffix: &str| Value::object().with("name", format!("{}-{}", req.name(), suffix)).with("labels", &labels);
            Response::new()
                .child(Value::object().with("apiVersion", "v1").with("kind", "ConfigMap").with("metadata", meta("cm")).with("data", Value::object().with("k", "v")))
                .child(
                    Value::object()
                        .with("apiVersion", "v1")
                        .with("kind", "Service")
                        .with("metadata", meta("svc"))
                        .with("spec", Value::object().with("ports", vec![Value::object().with("port", 80)])),
                )
                .event(Event::normal("ChildrenDesired", "2 children"))
                .event(Event::warning("JustTesting", "a warning from the tck"))
                .requeue_after(42)
                .status(Value::object().with("phase", "children"))
        }
        "retry" => Response::new()
            .status(Value::object().with("phase", "retrying").with("attempt", req.attempt()))
            .error(&format!("tck: retry requested at attempt {}", req.attempt())),
        "terminal" => Response::new().terminal_error("tck: terminal error requested"),
        "finalize" => {
            if !req.finalizing() {
                return Response::new().terminal_error("tck: finalize op without finalizing");
            }
            Response::new().finalized().no_children()
        }
        "big" => {
            let n = req.object().path(&["spec", "bytes"]).as_i64().unwrap_or(0).max(0) as usize;
            Response::new().status(Value::object().with("blob", "x".repeat(n)))
        }
        op => Response::new().terminal_error(&format!("tck: unknown spec.op {:?}", op)),
    }
}

export!(manifest, reconcile);
