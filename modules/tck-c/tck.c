/* tck.c: the wasmreconcile conformance guest in C. It implements the same
 * ops as modules/internal/tck (Go) and must pass the same cases in
 * modules/internal/tck/testdata/cases. It uses the ABI directly, with no SDK:
 * docs/abi.md is all it needs.
 *
 * Build (Debian packages clang-19, lld-19, wasi-libc, libclang-rt-19-dev-wasm32;
 * `make modules-c` installs them and runs this):
 *   clang-19 --target=wasm32-wasi -isystem /usr/include/wasm32-wasi -L/usr/lib/wasm32-wasi \
 *     -O2 -mexec-model=reactor -o tck-c.wasm tck.c json.c
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"

#define IMPORT(name) __attribute__((import_module("wasmreconcile"), import_name(name)))
#define EXPORT(name) __attribute__((export_name(name)))

IMPORT("log") void host_log(int32_t level, const char *msg, uint32_t len);
IMPORT("cache_read") uint64_t host_cache_read(const char *req, uint32_t req_len, char *buf, uint32_t buf_limit);

static uint64_t pack(const char *p, size_t n) { return (uint64_t)(uintptr_t)p << 32 | (uint32_t)n; }

EXPORT("wr_abi_v1") void wr_abi_v1(void) {}

EXPORT("wr_alloc") void *wr_alloc(uint32_t size) { return malloc(size ? size : 1); }

static const char manifest[] =
    "{\"name\":\"tck-c\",\"for\":{\"group\":\"tck.wasmreconcile.io\",\"version\":\"v1\",\"kind\":\"Probe\"},"
    "\"owns\":[{\"group\":\"\",\"version\":\"v1\",\"kind\":\"ConfigMap\"},{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Service\"}],"
    "\"reads\":[{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Secret\"}],"
    "\"triggers\":[{\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Secret\"},\"field\":\"spec.secretName\"}],\"finalizer\":true}";

EXPORT("wr_manifest") uint64_t wr_manifest(void) { return pack(manifest, sizeof manifest - 1); }

/* ---- cache reads ---- */

static char *cache_buf;
static uint32_t cache_cap;

/* cache_read returns the status; out and out_len hold the result. */
static uint32_t cache_read(const char *op, const char *ns, const char *name, const char *selector, const char *kind, char **out, uint32_t *out_len) {
  sbuf r = {0};
  sb_lit(&r, "{\"op\":"); sb_str(&r, op, strlen(op));
  sb_lit(&r, ",\"apiVersion\":\"v1\",\"kind\":"); sb_str(&r, kind, strlen(kind));
  sb_lit(&r, ",\"namespace\":"); sb_str(&r, ns, strlen(ns));
  if (name) { sb_lit(&r, ",\"name\":"); sb_str(&r, name, strlen(name)); }
  if (selector) { sb_lit(&r, ",\"labelSelector\":"); sb_str(&r, selector, strlen(selector)); }
  sb_lit(&r, "}");
  if (!cache_buf) { cache_cap = 64 << 10; cache_buf = malloc(cache_cap); }
  for (;;) {
    uint64_t res = host_cache_read(r.p, (uint32_t)r.len, cache_buf, cache_cap);
    uint32_t status = (uint32_t)(res >> 32), n = (uint32_t)res;
    if (n <= cache_cap) { *out = cache_buf; *out_len = n; return status; }
    cache_cap = n; /* too small: grow and ask again */
    cache_buf = realloc(cache_buf, cache_cap);
  }
}

/* ---- helpers ---- */

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* names appends a sorted JSON array of "Kind/name" for a list of objects. */
static void names(sbuf *b, const jval *list) {
  size_t n = list && list->t == J_ARR ? list->n : 0;
  char **s = calloc(n + 1, sizeof(char *));
  for (size_t k = 0; k < n; k++) {
    const char *kind = jstr(jget(list->items[k], "kind")), *name = jstr(jpath(list->items[k], "metadata", "name"));
    s[k] = malloc(strlen(kind) + strlen(name) + 2);
    strcpy(s[k], kind); strcat(s[k], "/"); strcat(s[k], name);
  }
  qsort(s, n, sizeof(char *), cmpstr);
  sb_lit(b, "[");
  for (size_t k = 0; k < n; k++) { if (k) sb_lit(b, ","); sb_str(b, s[k], strlen(s[k])); }
  sb_lit(b, "]");
}

/* failures writes the request's childFailures as a sorted array of
   "Kind/name:Reason". */
static void failures(sbuf *b, const jval *list) {
  size_t n = list && list->t == J_ARR ? list->n : 0;
  char **s = calloc(n + 1, sizeof(char *));
  for (size_t k = 0; k < n; k++) {
    const char *kind = jstr(jget(list->items[k], "kind")), *name = jstr(jget(list->items[k], "name")),
               *reason = jstr(jget(list->items[k], "reason"));
    s[k] = malloc(strlen(kind) + strlen(name) + strlen(reason) + 3);
    strcpy(s[k], kind); strcat(s[k], "/"); strcat(s[k], name); strcat(s[k], ":"); strcat(s[k], reason);
  }
  qsort(s, n, sizeof(char *), cmpstr);
  sb_lit(b, "[");
  for (size_t k = 0; k < n; k++) { if (k) sb_lit(b, ","); sb_str(b, s[k], strlen(s[k])); }
  sb_lit(b, "]");
}

static long long num(const jval *v) { return v && v->t == J_NUM ? (long long)v->num : 0; }

static sbuf out;

static uint64_t respond(void) { return pack(out.p, out.len); }

static uint64_t fail(const char *msg, int terminal) {
  out.len = 0;
  sb_lit(&out, "{\"error\":{\"message\":"); sb_str(&out, msg, strlen(msg));
  if (terminal) sb_lit(&out, ",\"terminal\":true");
  sb_lit(&out, "}}");
  return respond();
}

/* ---- reconcile ---- */

EXPORT("wr_reconcile") uint64_t wr_reconcile(const char *ptr, uint32_t len) {
  out.len = 0;
  jval *req = jparse(ptr, len);
  if (!req) return fail("tck-c: request is not valid JSON", 1);
  jval *obj = jget(req, "object");
  const char *op = jstr(jpath(obj, "spec", "op"));
  const char *ns = jstr(jpath(obj, "metadata", "namespace"));
  const char *name = jstr(jpath(obj, "metadata", "name"));
  jval *fin = jget(req, "finalizing");
  int finalizing = fin && fin->t == J_BOOL && fin->b;

  if (!strcmp(op, "emit")) {
    jval *r = jpath(obj, "spec", "response");
    if (r) sb_val(&out, r); else sb_lit(&out, "{}");
    return respond();
  }
  if (!strcmp(op, "echo")) {
    jval *cfg = jget(req, "config");
    jval *now = jget(req, "now");
    sb_lit(&out, "{\"status\":{\"attempt\":"); sb_int(&out, num(jget(req, "attempt")));
    sb_lit(&out, ",\"now\":"); sb_str(&out, jstr(now), strlen(jstr(now)));
    sb_lit(&out, finalizing ? ",\"finalizing\":true" : ",\"finalizing\":false");
    sb_lit(&out, ",\"config\":");
    if (cfg && cfg->t == J_OBJ) sb_val(&out, cfg); else sb_lit(&out, "{}");
    sb_lit(&out, ",\"children\":"); names(&out, jget(req, "children"));
    sb_lit(&out, ",\"related\":"); names(&out, jget(req, "related"));
    sb_lit(&out, ",\"childFailures\":"); failures(&out, jget(req, "childFailures"));
    sb_lit(&out, "}}");
    return respond();
  }
  if (!strcmp(op, "log")) {
    static const char *lines[] = {"tck debug line", "tck info line", "tck warn line", "tck error line"};
    for (int l = 0; l < 4; l++) host_log(l, lines[l], (uint32_t)strlen(lines[l]));
    sb_lit(&out, "{\"status\":{\"logged\":4}}");
    return respond();
  }
  if (!strcmp(op, "read")) {
    char *res; uint32_t n, st;
    sb_lit(&out, "{\"status\":{");
    st = cache_read("get", ns, "creds", NULL, "Secret", &res, &n);
    jval *s = st == 0 ? jparse(res, n) : NULL;
    sb_lit(&out, st == 0 ? "\"getFound\":true" : "\"getFound\":false");
    sb_lit(&out, st == 0 || st == 1 ? ",\"getErr\":\"\"" : ",\"getErr\":\"error\"");
    if (s) { const char *nm = jstr(jpath(s, "metadata", "name")); sb_lit(&out, ",\"getName\":"); sb_str(&out, nm, strlen(nm)); }
    st = cache_read("get", ns, "missing", NULL, "Secret", &res, &n);
    sb_lit(&out, st == 0 ? ",\"missingFound\":true" : ",\"missingFound\":false");
    sb_lit(&out, st == 0 || st == 1 ? ",\"missingErr\":\"\"" : ",\"missingErr\":\"error\"");
    st = cache_read("list", ns, NULL, "tier=backend", "Secret", &res, &n);
    jval *l = st == 0 ? jparse(res, n) : NULL;
    sb_lit(&out, ",\"listed\":"); sb_int(&out, l ? (long long)l->n : 0);
    sb_lit(&out, st == 0 ? ",\"listErr\":\"\"" : ",\"listErr\":\"error\"");
    st = cache_read("list", "", NULL, "", "Secret", &res, &n);
    l = st == 0 ? jparse(res, n) : NULL;
    sb_lit(&out, ",\"listedAll\":"); sb_int(&out, l ? (long long)l->n : 0);
    sb_lit(&out, st == 0 ? ",\"listAllErr\":\"\"" : ",\"listAllErr\":\"error\"");
    st = cache_read("get", "other-ns", "elsewhere", NULL, "Secret", &res, &n);
    sb_lit(&out, st == 2 ? ",\"otherNamespaceForbidden\":true" : ",\"otherNamespaceForbidden\":false");
    st = cache_read("get", ns, "p", NULL, "Pod", &res, &n);
    sb_lit(&out, st == 2 ? ",\"podForbidden\":true" : ",\"podForbidden\":false");
    st = cache_read("list", ns, NULL, "tier in (", "Secret", &res, &n);
    sb_lit(&out, st != 0 ? ",\"badSelectorRefused\":true" : ",\"badSelectorRefused\":false");
    sb_lit(&out, "}}");
    return respond();
  }
  if (!strcmp(op, "readbig")) {
    char *res; uint32_t n;
    if (cache_read("list", ns, NULL, "", "Secret", &res, &n) != 0) return fail("tck-c: list failed", 0);
    jval *l = jparse(res, n);
    if (!l || l->t != J_ARR) return fail("tck-c: list result is not an array", 0);
    long long total = 0;
    for (size_t k = 0; k < l->n; k++) total += (long long)strlen(jstr(jpath(l->items[k], "data", "blob")));
    sb_lit(&out, "{\"status\":{\"listed\":"); sb_int(&out, (long long)l->n);
    sb_lit(&out, ",\"bytes\":"); sb_int(&out, total); sb_lit(&out, "}}");
    return respond();
  }
  if (!strcmp(op, "children")) {
    sb_lit(&out, "{\"status\":{\"phase\":\"children\"},\"children\":[");
    sb_lit(&out, "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":");
    sbuf nm = {0}; sb_raw(&nm, name, strlen(name)); sb_lit(&nm, "-cm"); sb_str(&out, nm.p, nm.len);
    sb_lit(&out, ",\"labels\":{\"tck\":\"yes\"}},\"data\":{\"k\":\"v\"}},");
    sb_lit(&out, "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":");
    nm.len = 0; sb_raw(&nm, name, strlen(name)); sb_lit(&nm, "-svc"); sb_str(&out, nm.p, nm.len);
    sb_lit(&out, ",\"labels\":{\"tck\":\"yes\"}},\"spec\":{\"ports\":[{\"port\":80}]}}],");
    sb_lit(&out, "\"events\":[{\"type\":\"Normal\",\"reason\":\"ChildrenDesired\",\"message\":\"2 children\"},"
                 "{\"type\":\"Warning\",\"reason\":\"JustTesting\",\"message\":\"a warning from the tck\"}],"
                 "\"requeueAfterSeconds\":42}");
    return respond();
  }
  if (!strcmp(op, "statusonly")) { /* no children field: the children are left alone */
    sb_lit(&out, "{\"status\":{\"phase\":\"statusonly\"}}");
    return respond();
  }
  if (!strcmp(op, "prune")) { /* an empty list: every child is deleted */
    sb_lit(&out, "{\"status\":{\"phase\":\"prune\"},\"children\":[]}");
    return respond();
  }
  if (!strcmp(op, "retry")) {
    long long attempt = num(jget(req, "attempt"));
    sb_lit(&out, "{\"status\":{\"phase\":\"retrying\",\"attempt\":"); sb_int(&out, attempt);
    sb_lit(&out, "},\"error\":{\"message\":\"tck: retry requested at attempt "); sb_int(&out, attempt);
    sb_lit(&out, "\"}}");
    return respond();
  }
  if (!strcmp(op, "terminal")) return fail("tck: terminal error requested", 1);
  if (!strcmp(op, "finalize")) {
    if (!finalizing) return fail("tck: finalize op without finalizing", 1);
    sb_lit(&out, "{\"finalized\":true,\"children\":[]}");
    return respond();
  }
  if (!strcmp(op, "big")) {
    long long n = num(jpath(obj, "spec", "bytes"));
    sb_lit(&out, "{\"status\":{\"blob\":\"");
    char *x = malloc((size_t)n + 1); memset(x, 'x', (size_t)n);
    sb_raw(&out, x, (size_t)n);
    sb_lit(&out, "\"}}");
    return respond();
  }
  sbuf m = {0}; sb_lit(&m, "tck: unknown spec.op "); sb_str(&m, op, strlen(op));
  return fail(strndup(m.p, m.len), 1);
}
