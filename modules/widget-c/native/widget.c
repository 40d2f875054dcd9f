/* widget.c: the widget module's logic in C (modules/widget is the Go one),
 * for comparing languages on the same work: docs/benchmarks.md. It reads
 * the request lazily with a small scanner that locates values without
 * decoding them, and writes the response into the caller's buffer: no
 * allocation at all. ../wasm.c wraps it in the ABI; package native calls
 * it through cgo for the native side of the comparison.
 *
 * widget_reconcile returns the response's length; when that is more than
 * cap, nothing useful was written and the caller retries with a buffer of
 * at least that size. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_SIZE 100

/* ---- scanning: every function takes [p, e) and returns the position just
 * past what it read, or NULL on malformed input ---- */

static const char *ws(const char *p, const char *e) {
  while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* plain8 reports whether none of eight bytes is '"', '\\', a control
 * character or non-ASCII: such runs are skipped a word at a time. */
static int plain8(uint64_t x) {
  const uint64_t lo = 0x0101010101010101ULL, hi = 0x8080808080808080ULL;
  uint64_t q = x ^ (lo * '"'), b = x ^ (lo * '\\');
  return (((q - lo) & ~q) | ((b - lo) & ~b) | ((x - lo * 0x20) & ~x) | x) & hi ? 0 : 1;
}

static const char *skip_string(const char *p, const char *e) {
  for (p++; p < e; p++) {
    uint64_t w;
    while (e - p >= 8 && (memcpy(&w, p, 8), plain8(w))) p += 8;
    if (p >= e) break;
    if (*p == '"') return p + 1;
    if (*p == '\\') p++;
    else if ((unsigned char)*p < 0x20) return NULL;
  }
  return NULL;
}

static const char *skip_value(const char *p, const char *e, int depth) {
  if (depth > 1000) return NULL;
  p = ws(p, e);
  if (p >= e) return NULL;
  switch (*p) {
  case '"':
    return skip_string(p, e);
  case '{':
  case '[': {
    char close = *p == '{' ? '}' : ']';
    p = ws(p + 1, e);
    if (p < e && *p == close) return p + 1;
    for (;;) {
      if (close == '}') {
        if (p >= e || *p != '"' || !(p = skip_string(p, e))) return NULL;
        p = ws(p, e);
        if (p >= e || *p != ':') return NULL;
        p++;
      }
      if (!(p = skip_value(p, e, depth + 1))) return NULL;
      p = ws(p, e);
      if (p >= e) return NULL;
      if (*p == close) return p + 1;
      if (*p != ',') return NULL;
      p = ws(p + 1, e);
    }
  }
  default:
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
      while (p < e && (*p == '-' || *p == '+' || *p == '.' || *p == 'e' || *p == 'E' || (*p >= '0' && *p <= '9'))) p++;
      return p;
    }
    if (e - p >= 4 && (!memcmp(p, "true", 4) || !memcmp(p, "null", 4))) return p + 4;
    if (e - p >= 5 && !memcmp(p, "false", 5)) return p + 5;
    return NULL;
  }
}

/* A located value: [p, e), or p == NULL when absent. */
typedef struct { const char *p, *e; } val;

/* get returns member key of the object v (the last, if repeated, as Go
 * decoding does). Keys are compared raw: an escaped key never matches. */
static val get(val v, const char *key) {
  val out = {0, 0};
  size_t klen = strlen(key);
  const char *p = v.p, *e = v.e;
  if (!p || *p != '{') return out;
  p = ws(p + 1, e);
  if (p < e && *p == '}') return out;
  for (;;) {
    const char *k = p, *ke;
    if (p >= e || *p != '"' || !(ke = skip_string(p, e))) return (val){0, 0};
    p = ws(ke, e);
    if (p >= e || *p != ':') return (val){0, 0};
    const char *vs = ws(p + 1, e), *ve = skip_value(vs, e, 0);
    if (!ve) return (val){0, 0};
    if ((size_t)(ke - k - 2) == klen && !memcmp(k + 1, key, klen)) out = (val){vs, ve};
    p = ws(ve, e);
    if (p >= e) return (val){0, 0};
    if (*p == '}') return out;
    if (*p != ',') return (val){0, 0};
    p = ws(p + 1, e);
  }
}

/* str returns a string value's raw contents (escapes kept), or an empty one. */
static val str(val v) {
  if (!v.p || *v.p != '"' || v.e - v.p < 2) return (val){"", ""};
  return (val){v.p + 1, v.e - 1};
}

static int str_is(val v, const char *s) {
  val r = str(v);
  size_t n = strlen(s);
  return (size_t)(r.e - r.p) == n && !memcmp(r.p, s, n);
}

/* int_of parses an integer (or an integral number such as 3.0); 0 when
 * absent or not one. */
static int int_of(val v, long long *out) {
  if (!v.p || !(*v.p == '-' || (*v.p >= '0' && *v.p <= '9'))) return 0;
  const char *p = v.p;
  int neg = *p == '-';
  if (neg) p++;
  unsigned long long n = 0;
  for (; p < v.e && *p >= '0' && *p <= '9'; p++) {
    if (n > 922337203685477580ULL) return 0;
    n = n * 10 + (unsigned)(*p - '0');
  }
  if (p < v.e && *p == '.') { /* integral fractions only */
    for (p++; p < v.e && *p == '0'; p++) {}
  }
  if (p != v.e || n > 9223372036854775807ULL) return 0;
  *out = neg ? -(long long)n : (long long)n;
  return 1;
}

/* ---- writing ---- */

typedef struct { char *p; size_t len, cap; } out;

static void raw(out *o, const char *s, size_t n) {
  if (o->len + n <= o->cap) memcpy(o->p + o->len, s, n);
  o->len += n;
}
static void lit(out *o, const char *s) { raw(o, s, strlen(s)); }

/* quoted writes a string whose contents are already valid JSON string
 * contents (raw from the request, escapes kept). HTML characters are
 * escaped as Go's encoder does. */
static void contents(out *o, val s) {
  for (const char *p = s.p; p < s.e; p++) {
    switch (*p) {
    case '<': lit(o, "\\u003c"); break;
    case '>': lit(o, "\\u003e"); break;
    case '&': lit(o, "\\u0026"); break;
    default: raw(o, p, 1);
    }
  }
}

static void quoted(out *o, val s) {
  raw(o, "\"", 1);
  contents(o, s);
  raw(o, "\"", 1);
}

static void qlit(out *o, const char *s) { quoted(o, (val){s, s + strlen(s)}); }

static void integer(out *o, long long v) {
  char b[24];
  int n = 0;
  unsigned long long u = v < 0 ? -(unsigned long long)v : (unsigned long long)v;
  do { b[sizeof b - 1 - n++] = (char)('0' + u % 10); u /= 10; } while (u);
  if (v < 0) b[sizeof b - 1 - n++] = '-';
  raw(o, b + sizeof b - n, (size_t)n);
}

/* condition writes the Ready condition, keeping lastTransitionTime from
 * the object's Ready condition when its status is the same. */
static void condition(out *o, val conds, const char *status, const char *reason, val msg, long long gen, val now) {
  val ltt = now;
  if (conds.p && *conds.p == '[') {
    const char *p = ws(conds.p + 1, conds.e);
    while (p < conds.e && *p != ']') {
      const char *ve = skip_value(p, conds.e, 0);
      if (!ve) break;
      val c = {p, ve};
      if (*p == '{' && str_is(get(c, "type"), "Ready")) {
        val old = get(c, "lastTransitionTime");
        if (str_is(get(c, "status"), status) && str(old).e != str(old).p) ltt = str(old);
        break;
      }
      p = ws(ve, conds.e);
      if (p < conds.e && *p == ',') p = ws(p + 1, conds.e);
    }
  }
  lit(o, "[{\"lastTransitionTime\":");
  quoted(o, ltt);
  lit(o, ",\"message\":");
  quoted(o, msg);
  if (gen) { lit(o, ",\"observedGeneration\":"); integer(o, gen); }
  lit(o, ",\"reason\":");
  qlit(o, reason);
  lit(o, ",\"status\":");
  qlit(o, status);
  lit(o, ",\"type\":\"Ready\"}]");
}

/* The request's fields the widget reads, located in one pass. */
enum { ROOT, OBJECT, METADATA, SPEC, STATUS };
typedef struct { val obj, gen, size, color, status, conds, now; } fields;

/* scan walks the object at p (the container `where` names), descending
 * into the members the widget reads and skipping the rest. A repeated
 * member replaces the earlier one, as Go's decoding does. */
static const char *scan(const char *p, const char *e, int where, fields *f) {
  p = ws(p + 1, e);
  if (p < e && *p == '}') return p + 1;
  for (;;) {
    const char *k = p, *ke;
    if (p >= e || *p != '"' || !(ke = skip_string(p, e))) return NULL;
    p = ws(ke, e);
    if (p >= e || *p != ':') return NULL;
    p = ws(p + 1, e);
    size_t kl = (size_t)(ke - k - 2);
    const char *key = k + 1;
#define IS(s) (kl == sizeof(s) - 1 && !memcmp(key, s, kl))
    int into = -1;
    val *leaf = NULL;
    switch (where) {
    case ROOT:
      if (IS("object")) into = OBJECT;
      else if (IS("now")) leaf = &f->now;
      break;
    case OBJECT:
      if (IS("metadata")) into = METADATA;
      else if (IS("spec")) into = SPEC;
      else if (IS("status")) into = STATUS;
      break;
    case METADATA:
      if (IS("generation")) leaf = &f->gen;
      break;
    case SPEC:
      if (IS("size")) leaf = &f->size;
      else if (IS("color")) leaf = &f->color;
      break;
    case STATUS:
      if (IS("conditions")) leaf = &f->conds;
      break;
    }
#undef IS
    const char *ve;
    if (into >= 0 && p < e && *p == '{') {
      switch (into) { /* the last member of a name wins: forget the earlier */
      case OBJECT: *f = (fields){.now = f->now}; break;
      case METADATA: f->gen = (val){0, 0}; break;
      case SPEC: f->size = f->color = (val){0, 0}; break;
      case STATUS: f->conds = (val){0, 0}; break;
      }
      ve = scan(p, e, into, f);
      if (into == OBJECT) f->obj = (val){p, ve};
      if (into == STATUS) f->status = (val){p, ve};
    } else {
      ve = skip_value(p, e, 0);
      if (leaf) *leaf = (val){p, ve};
      else if (into == OBJECT) *f = (fields){.now = f->now}; /* not an object: no fields */
    }
    if (!ve) return NULL;
    p = ws(ve, e);
    if (p >= e) return NULL;
    if (*p == '}') return p + 1;
    if (*p != ',') return NULL;
    p = ws(p + 1, e);
  }
}

size_t widget_reconcile(const char *req, size_t len, char *buf, size_t cap) {
  out o = {buf, 0, cap};
  fields f = {0};
  const char *p = ws(req, req + len), *e = req + len;
  const char *end = p < e && *p == '{' ? scan(p, e, ROOT, &f) : NULL;
  if (!end || ws(end, e) != e) {
    lit(&o, "{\"error\":{\"message\":\"widget-c: the request is not a JSON object\",\"terminal\":true}}");
    return o.len;
  }
  val now = str(f.now);
  long long gen = 0, size = 1;
  int_of(f.gen, &gen);
  if (f.size.p && !int_of(f.size, &size)) size = 1;
  val color = str(f.color);
  static const char grey[] = "grey";
  if (color.p == color.e) color = (val){grey, grey + sizeof grey - 1};

  char msg[160];
  out m = {msg, 0, sizeof msg};
  if (size < 0 || size > MAX_SIZE) {
    lit(&m, "spec.size "); integer(&m, size); lit(&m, " is outside 0..100; set spec.size within range");
    lit(&o, "{\"error\":{\"message\":");
    quoted(&o, (val){msg, msg + m.len});
    lit(&o, ",\"terminal\":true},\"status\":{\"conditions\":");
    condition(&o, f.conds, "False", "InvalidSpec", (val){msg, msg + m.len}, gen, now);
    lit(&o, ",\"observedGeneration\":"); integer(&o, gen);
    lit(&o, ",\"summary\":\"invalid\"}}");
    return o.len;
  }
  lit(&m, "generation "); integer(&m, gen); lit(&m, " reconciled by widget-c v1");
  lit(&o, "{\"status\":{\"conditions\":");
  condition(&o, f.conds, "True", "Reconciled", (val){msg, msg + m.len}, gen, now);
  lit(&o, ",\"observedGeneration\":"); integer(&o, gen);
  lit(&o, ",\"summary\":\""); integer(&o, size); lit(&o, " x ");
  contents(&o, color);
  lit(&o, "\"}}");
  return o.len;
}
