package admission

import (
	"flag"
	"fmt"
)

// Flags are a service's --max-in-flight-bytes and --max-queue.
type Flags struct {
	MaxInFlightBytes int64
	MaxQueue         int
}

// Register adds the flags to fs with a service's defaults; weighs says how
// the service weighs a call ("input bytes × 2").
func (f *Flags) Register(fs *flag.FlagSet, bytes int64, queue int, weighs string) {
	fs.Int64Var(&f.MaxInFlightBytes, "max-in-flight-bytes", bytes, fmt.Sprintf("Memory the calls running may need together, a call weighing %s; calls beyond it wait (up to their deadline).", weighs))
	fs.IntVar(&f.MaxQueue, "max-queue", queue, "Calls that may wait for --max-in-flight-bytes; more are refused at once with ResourceExhausted (queue full).")
}

// Limiter is the limiter the flags say.
func (f *Flags) Limiter() *Weighted { return NewWeighted(f.MaxInFlightBytes, f.MaxQueue) }
