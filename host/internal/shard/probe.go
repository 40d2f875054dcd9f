package shard

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Everything is a shardSelector that matches every object, on key: the
// whole hash space as one range.
func Everything(key Key) string {
	return fmt.Sprintf("shardRange(%s, '0x0000000000000000', '0x10000000000000000')", key)
}

// Probe lists one object with Everything(key) as the shardSelector and
// reports whether the API server applied it, which it says by echoing the
// selector in the list's shardInfo: true when the ShardedListAndWatch
// feature gate is on for the kind list lists, false when the selector was
// ignored (the gate off, or an API server that predates it), so that the
// replica must filter what it lists itself. list is a kind's List, such as
// a typed client's or a dynamic client's.
func Probe(ctx context.Context, key Key, list func(context.Context, metav1.ListOptions) (runtime.Object, error)) (bool, error) {
	sel := Everything(key)
	obj, err := list(ctx, metav1.ListOptions{ShardSelector: sel, Limit: 1})
	if err != nil {
		return false, fmt.Errorf("probing for sharded lists (shardSelector %s): %w", sel, err)
	}
	var echoed string
	var found bool
	switch l := obj.(type) {
	case *unstructured.UnstructuredList:
		echoed, found, _ = unstructured.NestedString(l.Object, "metadata", "shardInfo", "selector")
	case metav1.ListMetaAccessor:
		lm, ok := l.GetListMeta().(*metav1.ListMeta)
		if !ok {
			return false, fmt.Errorf("probing for sharded lists: %T has no ListMeta", obj)
		}
		if lm.ShardInfo != nil {
			echoed, found = lm.ShardInfo.Selector, true
		}
	default:
		return false, fmt.Errorf("probing for sharded lists: %T is not a list", obj)
	}
	if !found {
		return false, nil
	}
	if echoed != sel {
		return false, fmt.Errorf("probing for sharded lists: the API server echoed the shardSelector %q, want %q", echoed, sel)
	}
	return true, nil
}
