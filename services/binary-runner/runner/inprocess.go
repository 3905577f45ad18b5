package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"google.golang.org/grpc/mem"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/fnresult"
	"github.com/fnrunner/fnrunner/libs/telemetry"
)

// inProcess is the go executor's Runtime: a linked-in function run as its
// binary would run it (fn.Run, as fn.AsMain does), but in this process. A
// panic is a failed run, and output over maxOutputBytes fails the run as a
// binary's would: its serialization stops there.
//
// Go cannot stop a goroutine, so a function past the caller's deadline is
// not stopped: Run returns the deadline's error once the function has
// returned, its result discarded, so that when the call is answered its
// work and its memory are gone. That wait is bounded because every
// linked-in function is: its work is linear in its input, or checked
// against a budget computed from its input before it is done (see package
// catalog); functions that are not run in processes of their own.
type inProcess struct {
	process fn.ResourceListProcessorFunc
	// maxOutputBytes bounds the output (0: unbounded).
	maxOutputBytes int
}

// Run implements Runtime.
func (p *inProcess) Run(ctx context.Context, input mem.BufferSlice) (*fnresult.Result, error) {
	_, span := telemetry.Start(ctx, "function", telemetry.AttrBytesIn.Int(input.Len()))
	res, err := p.run(ctx, input)
	if res != nil {
		span.SetAttributes(telemetry.AttrExitCode.Int(res.ExitCode), telemetry.AttrBytesOut.Int(res.ResourceList.Len()))
	}
	span.End()
	return res, err
}

func (p *inProcess) run(ctx context.Context, input mem.BufferSlice) (*fnresult.Result, error) {
	// The function reads one contiguous ResourceList; this copy is its own,
	// so it may outlive the call (see below).
	data := input.Materialize()
	type outcome struct {
		res *fnresult.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := runInProcess(p.process, data, p.maxOutputBytes)
		done <- outcome{res, err}
	}()
	select {
	case <-ctx.Done():
		o := <-done
		if o.res != nil {
			o.res.ResourceList.Free()
		}
		return nil, fmt.Errorf("function did not finish: %w", ctx.Err())
	case o := <-done:
		return o.res, o.err
	}
}

// errFunctionFailure is fn.Run's error for a function that returned false.
var errFunctionFailure = errors.New("error: function failure")

// exitLogger is a function's failure that says what its release's binary
// wrote on its standard error, where that is not fn.AsMain's "failed to
// evaluate function: <error>" (the catalog's releases on kyaml v0.10's
// framework; see functions/internal/exitlog).
type exitLogger interface {
	ExitLog() string
}

// exitLog is what the function's binary writes on its standard error when
// it fails with err.
func exitLog(err error) []byte {
	var l exitLogger
	if errors.As(err, &l) {
		return []byte(l.ExitLog())
	}
	return fmt.Appendf(nil, "failed to evaluate function: %v", err)
}

// runInProcess is fn.Run with what the function's binary would print and
// exit with: exit code 1 and the error on failure, exit code 2 and the
// stack on a panic.
//
// The output is written as it is serialized, up to maxOutputBytes (0:
// unbounded). A successful run whose output would exceed that fails with
// fnresult.ErrOutputTooLarge, keeping what fitted, as a binary's would; a
// failed run fails as ever, its output, cut short, dropped.
func runInProcess(p fn.ResourceListProcessorFunc, input []byte, maxOutputBytes int) (res *fnresult.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			res = &fnresult.Result{ExitCode: 2, Log: fmt.Appendf(nil, "panic: %v\n\n%s", v, functionFrames(debug.Stack()))}
			err = &fnresult.ExitError{Result: res}
		}
	}()
	out := &limitedBuffer{limit: maxOutputBytes}
	fnErr, writeErr := process(out, p, input)
	res = &fnresult.Result{ResourceList: evalwire.Bytes(out.Bytes())}
	if out.exceeded {
		if fnErr == nil {
			return res, fmt.Errorf("%w (%d bytes)", fnresult.ErrOutputTooLarge, maxOutputBytes)
		}
		res.ResourceList = nil
		res.ExitCode = 1
		res.Log = exitLog(fnErr)
		if !bytes.HasSuffix(res.Log, []byte("\n")) {
			res.Log = append(res.Log, '\n')
		}
		res.Log = fmt.Appendf(res.Log, "output dropped: over the %d-byte limit\n", maxOutputBytes)
		return res, &fnresult.ExitError{Result: res}
	}
	// fn.Run reports a failed serialization before the function's error.
	runErr := writeErr
	if runErr == nil {
		runErr = fnErr
	}
	if runErr != nil {
		// What the function's binary would print and exit with (exitLog).
		res.ExitCode = 1
		res.Log = exitLog(runErr)
		return res, &fnresult.ExitError{Result: res}
	}
	return res, nil
}

// process is fn.Run writing its output to w: it parses input, runs p on it
// and writes the ResourceList (see writeResourceList). fnErr is fn.Run's
// error for the input or the function (nil when it succeeded), writeErr the
// serialization's; nothing is written when the input does not parse.
func process(w io.Writer, p fn.ResourceListProcessorFunc, input []byte) (fnErr, writeErr error) {
	rl, err := fn.ParseResourceList(input)
	if err != nil {
		return err, nil
	}
	ok, fnErr := p(rl)
	if fnErr == nil && !ok {
		fnErr = errFunctionFailure
	}
	return fnErr, writeResourceList(w, rl)
}

// resultsPerDocument is how many results writeResourceList encodes at once.
const resultsPerDocument = 64

// writeResourceList writes rl to w as rl.ToYAML makes it (items sorted
// first), one YAML document at a time: the header, each item, the
// functionConfig and the results, a batch at a time. YAML's encoder holds
// every event of a document until its end (a hundred times its text or
// more), so this holds one item's rather than the whole output's, and a
// failing w ends the encoding at once.
//
// Each document is the top-level field it adds to the output (items: and
// results: as a list of one item or batch, the field's key written once),
// which YAML encodes as it encodes that field of the whole ResourceList.
func writeResourceList(w io.Writer, rl *fn.ResourceList) error {
	rl.Sort()
	header, err := encode(scalar("apiVersion"), scalar(kio.ResourceListAPIVersion), scalar("kind"), scalar(kio.ResourceListKind))
	if err != nil {
		return err
	}
	if _, err := w.Write(header); err != nil {
		return err
	}
	for i, item := range rl.Items {
		list := &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{item.MoveToResourceNode().YNode()}}
		if err := encodeField(w, i > 0, "items", list); err != nil {
			return err
		}
	}
	if !rl.FunctionConfig.IsEmpty() {
		if err := encodeField(w, false, "functionConfig", rl.FunctionConfig.MoveToResourceNode().YNode()); err != nil {
			return err
		}
	}
	for i := 0; i < len(rl.Results); i += resultsPerDocument {
		batch := rl.Results[i:min(i+resultsPerDocument, len(rl.Results))]
		// The SDK's own encoding of results (through JSON), in a
		// ResourceList that has nothing else.
		doc, err := (&fn.ResourceList{FunctionConfig: fn.NewEmptyKubeObject(), Results: batch}).ToYAML()
		if err != nil {
			return err
		}
		results, ok := bytes.CutPrefix(doc, header)
		if !ok {
			return fmt.Errorf("encoding results: unexpected ResourceList header in %.100q", doc)
		}
		if err := writeField(w, i > 0, results); err != nil {
			return err
		}
	}
	return nil
}

// encodeField writes a document of the one field key: value to w, less its
// key line if continued (the key already written, value a list).
func encodeField(w io.Writer, continued bool, key string, value *yaml.Node) error {
	doc, err := encode(scalar(key), value)
	if err != nil {
		return err
	}
	return writeField(w, continued, doc)
}

// writeField writes doc, one field's YAML, to w, less its key line if
// continued.
func writeField(w io.Writer, continued bool, doc []byte) error {
	if continued {
		_, rest, ok := bytes.Cut(doc, []byte("\n"))
		if !ok {
			return fmt.Errorf("encoding a list: no key line in %.100q", doc)
		}
		doc = rest
	}
	_, err := w.Write(doc)
	return err
}

// encode is the mapping of the given keys and values as YAML, encoded as
// rl.ToYAML encodes.
func encode(content ...*yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	if err := yaml.NewEncoder(&b).Encode(&yaml.Node{Kind: yaml.MappingNode, Content: content}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// scalar is a string node as the SDK builds them.
func scalar(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: yaml.NodeTagString, Value: s}
}

// limitedBuffer is a bytes.Buffer that takes at most limit bytes (0: no
// limit): a write past it fails with errOutputLimit and the buffer keeps
// what fitted.
type limitedBuffer struct {
	bytes.Buffer
	limit    int
	exceeded bool
}

var errOutputLimit = errors.New("output limit reached")

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.limit > 0 && b.Len()+len(p) > b.limit {
		b.exceeded = true
		n, _ := b.Buffer.Write(p[:b.limit-b.Len()])
		return n, errOutputLimit
	}
	return b.Buffer.Write(p)
}

// processFrame is the runner's own frame under every function's: process
// calls it.
var processFrame = []byte("github.com/fnrunner/fnrunner/services/binary-runner/runner.process(")

// functionFrames is a panicking function's goroutine stack (debug.Stack's
// text, taken in the recovering deferred call) as the function's binary
// would print it: the goroutine's header and the frames from where it
// panicked down to the function's entry, without the recovery's frames
// above nor the runner's below, which say nothing about the function and
// much about the runner. A frame is its call's line and the tab-indented
// lines after it ("...N frames elided..." is a frame of one line).
func functionFrames(stack []byte) []byte {
	lines := bytes.Split(bytes.TrimRight(stack, "\n"), []byte("\n"))
	if len(lines) < 2 {
		return stack
	}
	header := lines[0]
	var frames [][][]byte
	for _, l := range lines[1:] {
		if len(l) > 0 && l[0] == '\t' && len(frames) > 0 {
			frames[len(frames)-1] = append(frames[len(frames)-1], l)
			continue
		}
		frames = append(frames, [][]byte{l})
	}
	start, end := -1, len(frames)
	for i, f := range frames {
		if start < 0 {
			if bytes.HasPrefix(f[0], []byte("panic(")) {
				start = i + 1
			}
			continue
		}
		if bytes.HasPrefix(f[0], processFrame) {
			end = i
			break
		}
	}
	if start < 0 || start >= end {
		return stack
	}
	out := append(append([]byte(nil), header...), '\n')
	for _, f := range frames[start:end] {
		out = append(out, bytes.Join(f, []byte("\n"))...)
		out = append(out, '\n')
	}
	return out
}
