// Package protocol is the reconcile protocol between the host and a guest,
// written once and used by every caller: the cluster reconciler and the
// offline runner (`operator invoke`, `operator test`) both build requests,
// decode responses and check them here, so a response that `operator test`
// accepts is one the cluster accepts, and one it refuses is refused with the
// same kind and the same message.
//
// The steps of one reconcile, as this package names them:
//
//	EncodeRequest(abi.Request)              the wire form of what the guest observes
//	Rules.Decode(owner, call, output)       the guest's bytes → a checked *Response
//	KindOf(err)                             how a reconcile ended, in one vocabulary
//
// A response is checked against the rules in docs/abi.md ("Response rules"):
// JSON with no unknown or duplicate fields; at most Limits.MaxEvents Events,
// each of type Normal or Warning with a reason of 1..MaxEventReasonLength
// bytes and a message of at most MaxEventMessageBytes bytes; a
// requeueAfterSeconds within Limits.MaxRequeueAfter; an error with a
// message; a status that keeps its object within Limits.MaxObjectBytes;
// children of the kinds the manifest owns, each with a valid name and
// metadata, within Limits.MaxObjectBytes, in its owner's namespace (a
// namespaced owner cannot own cluster-scoped objects), listed once, and
// never the owner itself.
package protocol
