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
)

func (k opKind) String() string {
	return [...]string{"GET", "SET", "INCR", "SET NX", "GETSET", "DEL"}[k]
}

// kvInput is one invocation. Every value is an integer so that INCR
// applies to whatever SET, SET NX or GETSET wrote.
type kvInput struct {
	Kind  opKind
	Key   string
	Value int64 // SET, SET NX, GETSET
}

// kvOutput is one response. Unknown marks an operation whose outcome the
// client could not learn (the connection broke after the request may have
// been sent): it may have taken effect at any time after its invocation,
// or never, so its response time is recorded as "never" and the model
// accepts any outcome for it.
type kvOutput struct {
	Unknown bool
	Present bool  // GET, GETSET: the key existed (its old value is Value)
	Value   int64 // GET, GETSET: the value read; INCR: the new value
	Applied bool  // SET NX: the value was set; DEL: a key was removed
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

// kvModel is the sequential specification of a map of integer registers,
// partitioned by key (operations on different keys commute).
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).Key
			if _, seen := byKey[k]; !seen {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return register{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		return step(state.(register), input.(kvInput), output.(kvOutput))
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(kvInput), output.(kvOutput)
		if out.Unknown {
			return fmt.Sprintf("%v %s %d -> ?", in.Kind, in.Key, in.Value)
		}
		return fmt.Sprintf("%v %s %d -> %+v", in.Kind, in.Key, in.Value, out)
	},
	DescribeState: func(state interface{}) string { return fmt.Sprintf("%+v", state.(register)) },
}
