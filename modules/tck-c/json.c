#include "json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *s; size_t i, n; } parser;

static jval *newval(jtype t) { jval *v = calloc(1, sizeof(jval)); v->t = t; return v; }
static void ws(parser *p) { while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++; }
static jval *value(parser *p, int depth);

static int hex4(parser *p, unsigned *out) {
  if (p->n - p->i < 4) return 0;
  unsigned r = 0;
  for (int k = 0; k < 4; k++) {
    char c = p->s[p->i + k];
    r <<= 4;
    if (c >= '0' && c <= '9') r |= c - '0';
    else if (c >= 'a' && c <= 'f') r |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') r |= c - 'A' + 10;
    else return 0;
  }
  p->i += 4; *out = r; return 1;
}

static void put_utf8(sbuf *b, unsigned r) {
  char o[4]; size_t n;
  if (r < 0x80) { o[0] = (char)r; n = 1; }
  else if (r < 0x800) { o[0] = 0xC0 | (r >> 6); o[1] = 0x80 | (r & 0x3F); n = 2; }
  else if (r < 0x10000) { o[0] = 0xE0 | (r >> 12); o[1] = 0x80 | ((r >> 6) & 0x3F); o[2] = 0x80 | (r & 0x3F); n = 3; }
  else { o[0] = 0xF0 | (r >> 18); o[1] = 0x80 | ((r >> 12) & 0x3F); o[2] = 0x80 | ((r >> 6) & 0x3F); o[3] = 0x80 | (r & 0x3F); n = 4; }
  sb_raw(b, o, n);
}

static char *string(parser *p, size_t *len) {
  sbuf b = {0};
  p->i++; /* opening quote */
  while (p->i < p->n) {
    char c = p->s[p->i++];
    if (c == '"') { sb_raw(&b, "", 1); *len = b.len - 1; return b.p; }
    if ((unsigned char)c < 0x20) return NULL;
    if (c != '\\') { sb_raw(&b, &c, 1); continue; }
    if (p->i >= p->n) return NULL;
    char e = p->s[p->i++];
    switch (e) {
    case '"': case '\\': case '/': sb_raw(&b, &e, 1); break;
    case 'b': sb_raw(&b, "\b", 1); break;
    case 'f': sb_raw(&b, "\f", 1); break;
    case 'n': sb_raw(&b, "\n", 1); break;
    case 'r': sb_raw(&b, "\r", 1); break;
    case 't': sb_raw(&b, "\t", 1); break;
    case 'u': {
      unsigned r, r2;
      if (!hex4(p, &r)) return NULL;
      if (r >= 0xD800 && r < 0xDC00 && p->i + 1 < p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
        size_t save = p->i; p->i += 2;
        if (hex4(p, &r2) && r2 >= 0xDC00 && r2 < 0xE000) r = 0x10000 + ((r - 0xD800) << 10) + (r2 - 0xDC00);
        else { p->i = save; r = 0xFFFD; }
      } else if (r >= 0xD800 && r < 0xE000) r = 0xFFFD;
      put_utf8(&b, r);
      break;
    }
    default: return NULL;
    }
  }
  return NULL;
}

static jval *value(parser *p, int depth) {
  if (depth > 1000) return NULL;
  ws(p);
  if (p->i >= p->n) return NULL;
  char c = p->s[p->i];
  if (c == '{' || c == '[') {
    int obj = c == '{';
    jval *v = newval(obj ? J_OBJ : J_ARR);
    size_t cap = 0;
    p->i++; ws(p);
    if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) { p->i++; return v; }
    for (;;) {
      char *key = NULL; size_t klen;
      if (obj) {
        ws(p);
        if (p->i >= p->n || p->s[p->i] != '"' || !(key = string(p, &klen))) return NULL;
        ws(p);
        if (p->i >= p->n || p->s[p->i] != ':') return NULL;
        p->i++;
      }
      jval *item = value(p, depth + 1);
      if (!item) return NULL;
      if (v->n == cap) {
        cap = cap ? cap * 2 : 8;
        v->items = realloc(v->items, cap * sizeof(jval *));
        if (obj) v->keys = realloc(v->keys, cap * sizeof(char *));
      }
      v->items[v->n] = item;
      if (obj) v->keys[v->n] = key;
      v->n++;
      ws(p);
      if (p->i >= p->n) return NULL;
      if (p->s[p->i] == ',') { p->i++; continue; }
      if (p->s[p->i] == (obj ? '}' : ']')) { p->i++; return v; }
      return NULL;
    }
  }
  if (c == '"') { jval *v = newval(J_STR); if (!(v->str = string(p, &v->len))) return NULL; return v; }
  if (!strncmp(p->s + p->i, "true", p->n - p->i < 4 ? p->n - p->i : 4) && p->n - p->i >= 4) { p->i += 4; jval *v = newval(J_BOOL); v->b = 1; return v; }
  if (!strncmp(p->s + p->i, "false", p->n - p->i < 5 ? p->n - p->i : 5) && p->n - p->i >= 5) { p->i += 5; return newval(J_BOOL); }
  if (!strncmp(p->s + p->i, "null", p->n - p->i < 4 ? p->n - p->i : 4) && p->n - p->i >= 4) { p->i += 4; return newval(J_NULL); }
  if (c == '-' || (c >= '0' && c <= '9')) {
    char tmp[64]; size_t k = 0;
    while (p->i < p->n && k < sizeof tmp - 1 && strchr("+-0123456789.eE", p->s[p->i])) tmp[k++] = p->s[p->i++];
    tmp[k] = 0;
    char *end; jval *v = newval(J_NUM); v->num = strtod(tmp, &end);
    return *end ? NULL : v;
  }
  return NULL;
}

jval *jparse(const char *s, size_t len) {
  parser p = {s, 0, len};
  jval *v = value(&p, 0);
  ws(&p);
  return v && p.i == p.n ? v : NULL;
}

jval *jget(const jval *obj, const char *key) {
  if (!obj || obj->t != J_OBJ) return NULL;
  for (size_t k = obj->n; k-- > 0;) /* the last duplicate wins, as in Go */
    if (!strcmp(obj->keys[k], key)) return obj->items[k];
  return NULL;
}

jval *jpath(const jval *v, const char *a, const char *b) { jval *x = jget(v, a); return b ? jget(x, b) : x; }
const char *jstr(const jval *v) { return v && v->t == J_STR ? v->str : ""; }

void sb_raw(sbuf *b, const char *s, size_t n) {
  if (b->len + n > b->cap) { b->cap = (b->len + n) * 2 + 64; b->p = realloc(b->p, b->cap); }
  memcpy(b->p + b->len, s, n); b->len += n;
}
void sb_lit(sbuf *b, const char *s) { sb_raw(b, s, strlen(s)); }
void sb_int(sbuf *b, long long v) { char t[32]; sb_raw(b, t, (size_t)snprintf(t, sizeof t, "%lld", v)); }

void sb_str(sbuf *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  sb_raw(b, "\"", 1);
  for (size_t k = 0; k < n; k++) {
    unsigned char c = (unsigned char)s[k];
    if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; sb_raw(b, e, 2); }
    else if (c == '\n') sb_raw(b, "\\n", 2);
    else if (c == '\r') sb_raw(b, "\\r", 2);
    else if (c == '\t') sb_raw(b, "\\t", 2);
    else if (c < 0x20) { char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]}; sb_raw(b, e, 6); }
    else sb_raw(b, (const char *)&s[k], 1);
  }
  sb_raw(b, "\"", 1);
}

void sb_val(sbuf *b, const jval *v) {
  char t[40];
  switch (v->t) {
  case J_NULL: sb_lit(b, "null"); break;
  case J_BOOL: sb_lit(b, v->b ? "true" : "false"); break;
  case J_NUM: sb_raw(b, t, (size_t)snprintf(t, sizeof t, "%.17g", v->num)); break;
  case J_STR: sb_str(b, v->str, v->len); break;
  case J_ARR: case J_OBJ:
    sb_raw(b, v->t == J_OBJ ? "{" : "[", 1);
    for (size_t k = 0; k < v->n; k++) {
      if (k) sb_raw(b, ",", 1);
      if (v->t == J_OBJ) { sb_str(b, v->keys[k], strlen(v->keys[k])); sb_raw(b, ":", 1); }
      sb_val(b, v->items[k]);
    }
    sb_raw(b, v->t == J_OBJ ? "}" : "]", 1);
  }
}
