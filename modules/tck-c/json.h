/* json.h: a small JSON tree for the C conformance guest. Parse builds a tree
 * of jval; jget looks up an object member; the writer appends JSON to a
 * growable buffer. Memory is never freed: one reconcile's arena is the whole
 * heap, and the host discards instances it no longer trusts. */
#ifndef TCK_JSON_H
#define TCK_JSON_H
#include <stddef.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
  jtype t;
  int b;             /* J_BOOL */
  double num;        /* J_NUM */
  char *str;         /* J_STR: NUL-terminated UTF-8 */
  size_t len;        /* J_STR length */
  size_t n;          /* J_ARR, J_OBJ: element count */
  struct jval **items;
  char **keys;       /* J_OBJ */
} jval;

jval *jparse(const char *s, size_t len);       /* NULL on malformed input */
jval *jget(const jval *obj, const char *key);   /* NULL when absent or not an object */
jval *jpath(const jval *v, const char *a, const char *b); /* v.a.b, b may be NULL */
const char *jstr(const jval *v);                /* "" unless a string */

typedef struct { char *p; size_t len, cap; } sbuf;
void sb_raw(sbuf *b, const char *s, size_t n);
void sb_lit(sbuf *b, const char *s);
void sb_str(sbuf *b, const char *s, size_t n);  /* quoted and escaped */
void sb_int(sbuf *b, long long v);
void sb_val(sbuf *b, const jval *v);            /* re-encode a tree */
#endif
