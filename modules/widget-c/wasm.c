/* wasm.c: the ABI around widget.c (docs/abi.md), with no SDK. Buffers are
 * reused from call to call and grow when a request or response needs it. */
#include <stdint.h>
#include <stdlib.h>

size_t widget_reconcile(const char *req, size_t len, char *buf, size_t cap);

#define EXPORT(name) __attribute__((export_name(name)))

static uint64_t pack(const char *p, size_t n) { return (uint64_t)(uintptr_t)p << 32 | (uint32_t)n; }

EXPORT("wr_abi_v1") void wr_abi_v1(void) {}

static char *in, *resp;
static size_t in_cap, resp_cap;

EXPORT("wr_alloc") void *wr_alloc(uint32_t size) {
  if (size > in_cap || !in) {
    free(in);
    in_cap = size ? size : 1;
    in = malloc(in_cap);
  }
  return in;
}

static const char manifest[] =
    "{\"name\":\"widget-c\",\"for\":{\"group\":\"examples.wasmreconcile.io\",\"version\":\"v1alpha1\",\"kind\":\"Widget\"}}";

EXPORT("wr_manifest") uint64_t wr_manifest(void) { return pack(manifest, sizeof manifest - 1); }

EXPORT("wr_reconcile") uint64_t wr_reconcile(const char *req, uint32_t len) {
  for (;;) {
    size_t n = widget_reconcile(req, len, resp, resp_cap);
    if (n <= resp_cap) return pack(resp, n);
    free(resp);
    resp_cap = n;
    resp = malloc(resp_cap);
  }
}
