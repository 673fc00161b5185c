// Package linearizability checks that the pDKVS Redis-protocol service is
// linearizable while the processes behind it are killed and restarted:
// concurrent clients record every operation with its invocation and
// response times, and porcupine searches for a linearization of the
// history against the sequential model of this file.
package linearizability

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// opKind is a Redis string command the clients issue.
type opKind int

const (
	opGet    opKind = iota // GET k
	opSet                  // SET k v
	opIncr                 // INCR k
	opSetNX                // SET k v NX
	opGetSet               // GETSET k v
	opDel                  // DEL k
	opMulti                // MULTI, GET k, INCR k2, SET k v, EXEC
	opWatch                // WATCH k, GET k, MULTI, SET k v, EXEC
)

func (k opKind) String() string {
	return [...]string{"GET", "SET", "INCR", "SET NX", "GETSET", "DEL", "MULTI", "WATCH"}[k]
}

// kvInput is one invocation. Every value is an integer so that INCR
// applies to whatever SET, SET NX or GETSET wrote.
type kvInput struct {
	Kind  opKind
	Key   string
	Key2  string // MULTI: the key it increments (not Key)
	Value int64  // SET, SET NX, GETSET, MULTI, WATCH
}

// kvOutput is one response. Unknown marks an operation whose outcome the
// client could not learn (the connection broke after the request may have
// been sent): it may have taken effect at any time after its invocation,
// or never, so its response time is recorded as "never" and the model
// accepts any outcome for it.
type kvOutput struct {
	Unknown bool
	Present bool  // GET, GETSET, MULTI, WATCH: the key existed (its old value is Value)
	Value   int64 // GET, GETSET, MULTI, WATCH: the value read; INCR: the new value
	Applied bool  // SET NX: the value was set; DEL: a key was removed; WATCH: EXEC ran
	Value2  int64 // MULTI: the INCR's new value
}

// register is the state of one key: absent, or an integer.
type register struct {
	Present bool
	Value   int64
}

// step applies one operation to the state of its key and says whether the
// recorded output is what a sequential execution would have returned.
func step(st register, in kvInput, out kvOutput) (bool, register) {
	switch in.Kind {
	case opGet:
		return out.Unknown || (out.Present == st.Present && (!st.Present || out.Value == st.Value)), st
	case opSet:
		return true, register{Present: true, Value: in.Value}
	case opIncr:
		next := register{Present: true, Value: st.Value + 1} // absent counts as 0
		return out.Unknown || out.Value == next.Value, next
	case opSetNX:
		if st.Present {
			return out.Unknown || !out.Applied, st
		}
		return out.Unknown || out.Applied, register{Present: true, Value: in.Value}
	case opGetSet:
		ok := out.Unknown || (out.Present == st.Present && (!st.Present || out.Value == st.Value))
		return ok, register{Present: true, Value: in.Value}
	case opDel:
		return out.Unknown || out.Applied == st.Present, register{}
	}
	panic(fmt.Sprintf("unknown operation kind %d", in.Kind))
}

// kvState is the state of the keys of one partition.
type kvState map[string]register

// with returns a copy of st with key set to r (states are never changed
// in place: porcupine keeps earlier ones).
func (st kvState) with(key string, r register) kvState {
	next := make(kvState, len(st)+1)
	for k, v := range st {
		next[k] = v
	}
	next[key] = r
	return next
}

// stepState applies one operation to the keys' state. A transaction's
// reads see the state at its EXEC (its linearization point): MULTI's GET
// the value before its SET, WATCH's GET — sent before the MULTI — the
// value at the EXEC when the EXEC ran (nothing wrote the key in between),
// anything when the EXEC was refused (null: then nothing changes).
func stepState(st kvState, in kvInput, out kvOutput) (bool, kvState) {
	readOK := func(r register) bool {
		return out.Present == r.Present && (!r.Present || out.Value == r.Value)
	}
	switch in.Kind {
	case opMulti:
		cur, ctr := st[in.Key], st[in.Key2]
		next := register{Present: true, Value: ctr.Value + 1}
		ok := out.Unknown || (readOK(cur) && out.Value2 == next.Value)
		return ok, st.with(in.Key2, next).with(in.Key, register{Present: true, Value: in.Value})
	case opWatch:
		cur := st[in.Key]
		if out.Unknown {
			// The EXEC ran if nothing wrote the key since its GET: taken
			// to be when the state still is what the GET saw.
			if readOK(cur) {
				return true, st.with(in.Key, register{Present: true, Value: in.Value})
			}
			return true, st
		}
		if !out.Applied {
			return true, st
		}
		return readOK(cur), st.with(in.Key, register{Present: true, Value: in.Value})
	}
	ok, next := step(st[in.Key], in, out)
	return ok, st.with(in.Key, next)
}

// keysOf are the keys an operation names.
func keysOf(in kvInput) []string {
	if in.Key2 != "" {
		return []string{in.Key, in.Key2}
	}
	return []string{in.Key}
}

// kvModel is the sequential specification of a map of integer registers,
// partitioned into the groups of keys that operations tie together
// (operations on keys of different groups commute; a MULTI ties its two
// keys).
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		group := map[string]string{} // union-find over the keys
		var find func(k string) string
		find = func(k string) string {
			if p, ok := group[k]; ok && p != k {
				root := find(p)
				group[k] = root
				return root
			}
			group[k] = k
			return k
		}
		for _, op := range history {
			keys := keysOf(op.Input.(kvInput))
			for _, k := range keys[1:] {
				group[find(k)] = find(keys[0])
			}
		}
		byGroup := map[string][]porcupine.Operation{}
		var roots []string
		for _, op := range history {
			root := find(op.Input.(kvInput).Key)
			if _, seen := byGroup[root]; !seen {
				roots = append(roots, root)
			}
			byGroup[root] = append(byGroup[root], op)
		}
		parts := make([][]porcupine.Operation, 0, len(roots))
		for _, r := range roots {
			parts = append(parts, byGroup[r])
		}
		return parts
	},
	Init: func() interface{} { return kvState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		return stepState(state.(kvState), input.(kvInput), output.(kvOutput))
	},
	Equal: func(a, b interface{}) bool {
		x, y := a.(kvState), b.(kvState)
		for k, v := range x {
			if y[k] != v {
				return false
			}
		}
		for k, v := range y {
			if x[k] != v {
				return false
			}
		}
		return true
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(kvInput), output.(kvOutput)
		if out.Unknown {
			return fmt.Sprintf("%v %s %s %d -> ?", in.Kind, in.Key, in.Key2, in.Value)
		}
		return fmt.Sprintf("%v %s %s %d -> %+v", in.Kind, in.Key, in.Key2, in.Value, out)
	},
	DescribeState: func(state interface{}) string { return fmt.Sprintf("%v", state.(kvState)) },
}
