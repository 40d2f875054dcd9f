package operator

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/wasmreconcile/wasmreconcile/host/internal/membership"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
)

// ShardingOptionError is a ShardingOptions field that cannot work: Field
// names it as the struct does (Slots, Mode, Key, Group, Identity,
// BalanceTolerance, BalanceInterval), Value is what it held and Want what
// it takes.
type ShardingOptionError struct {
	Field, Value, Want string
}

func (e *ShardingOptionError) Error() string {
	return fmt.Sprintf("sharding: %s %q: %s", e.Field, e.Value, e.Want)
}

// Validate reports the first field of o that cannot work, as a
// *ShardingOptionError, without contacting the API server, so that a
// binary can refuse a bad flag before it connects. Zero values stand for
// their defaults and pass, and so do negative durations, which New also
// defaults; Identity and Namespace, required once Enabled, may still be
// empty here (New fills them). New runs the same checks.
func (o ShardingOptions) Validate() error {
	if o.Slots != 0 {
		if _, err := shard.NewSpace(o.Slots); err != nil {
			return &ShardingOptionError{"Slots", strconv.Itoa(o.Slots), fmt.Sprintf("want a power of two from 1 to %d, the same on every replica", shard.MaxSlots)}
		}
	}
	switch o.Mode {
	case "", ShardModeAuto, ShardModeServerSide, ShardModeClientSide:
	default:
		return &ShardingOptionError{"Mode", o.Mode, fmt.Sprintf("want %s, %s or %s", ShardModeAuto, ShardModeServerSide, ShardModeClientSide)}
	}
	if o.Key != "" {
		if _, err := shard.ParseKey(o.Key); err != nil {
			return &ShardingOptionError{"Key", o.Key, "want namespace or uid"}
		}
	}
	if t := o.BalanceTolerance; math.IsNaN(t) || math.IsInf(t, 0) {
		return &ShardingOptionError{"BalanceTolerance", fmt.Sprint(t), "want a fraction (0.1 for 10%), or a negative one to make no plans"}
	}
	if d := o.BalanceInterval; d > 0 && d < time.Second {
		return &ShardingOptionError{"BalanceInterval", d.String(), "want at least 1s (the replicas count their loads every half of it)"}
	}
	group := o.Group
	if group == "" {
		group = DefaultShardGroup
	}
	if err := membership.CheckGroup(group); err != nil {
		return &ShardingOptionError{"Group", o.Group, "want a label value (the Leases' label): " + err.Error()}
	}
	if o.Identity != "" {
		if err := membership.CheckLeaseName(group, o.Identity); err != nil {
			return &ShardingOptionError{"Identity", o.Identity, fmt.Sprintf("the replica's Lease is named %s, which must be a DNS subdomain name (lower case letters, digits, '-' and '.'; at most %d characters in all): %s", membership.LeaseName(group, "IDENTITY"), validation.DNS1123SubdomainMaxLength, err)}
		}
	}
	return nil
}
