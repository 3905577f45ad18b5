package evalwire

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// split cuts b into buffers at the given offsets, each from gRPC's pool as
// the transport's would be.
func split(b []byte, cuts ...int) mem.BufferSlice {
	var out mem.BufferSlice
	last := 0
	for _, c := range append(cuts, len(b)) {
		if c < last || c > len(b) {
			continue
		}
		out = append(out, mem.Copy(b[last:c], mem.DefaultBufferPool()))
		last = c
	}
	return out
}

func TestRequestMatchesGenerated(t *testing.T) {
	want := &pb.EvaluateFunctionRequest{Image: "set-namespace", Tag: ">= 0.4.0 < 0.5.0", ResourceList: []byte("kind: ResourceList\nitems: []\n")}
	wire, err := proto.Marshal(want)
	require.NoError(t, err)
	// Every place the transport could have cut the message.
	for cut := 0; cut <= len(wire); cut++ {
		data := split(wire, cut)
		var got Request
		require.NoError(t, (codec{}).Unmarshal(data, &got), "cut %d", cut)
		data.Free() // as gRPC does after Unmarshal: got keeps its own references
		require.Equal(t, want.Image, got.Image, "cut %d: image", cut)
		require.Equal(t, want.Tag, got.Tag, "cut %d: tag", cut)
		require.Equal(t, string(want.ResourceList), string(got.ResourceList.Materialize()), "cut %d: resource list", cut)
		out, err := (codec{}).Marshal(&got)
		require.NoError(t, err)
		back := new(pb.EvaluateFunctionRequest)
		require.NoError(t, proto.Unmarshal(out.Materialize(), back))
		out.Free()
		require.True(t, proto.Equal(back, want), "cut %d: generated code reads %v", cut, back)
		got.Free()
	}
}

func TestResponseMatchesGenerated(t *testing.T) {
	want := &pb.EvaluateFunctionResponse{ResourceList: []byte(strings.Repeat("x", 70000)), Log: []byte("done\n")}
	wire, err := proto.Marshal(want)
	require.NoError(t, err)
	var got Response
	require.NoError(t, (codec{}).Unmarshal(split(wire, 1, 2, 3, 16384, 32768, len(wire)-3), &got))
	out, err := (codec{}).Marshal(&got)
	require.NoError(t, err)
	// bytes.Equal rather than require.Equal: a diff of 70 kB helps nobody.
	require.True(t, bytes.Equal(out.Materialize(), wire), "re-encoded response differs from the generated encoding")
}

func TestEmptyFieldsLeftOut(t *testing.T) {
	out, err := (codec{}).Marshal(&Request{})
	require.NoError(t, err)
	require.Zero(t, out.Len(), "bytes an empty request encodes to")
}

func TestUnknownAndRepeatedFields(t *testing.T) {
	var wire []byte
	wire = protowire.AppendTag(wire, 1, protowire.BytesType)
	wire = protowire.AppendBytes(wire, []byte("first"))
	wire = protowire.AppendTag(wire, 7, protowire.VarintType)
	wire = protowire.AppendVarint(wire, 300)
	wire = protowire.AppendTag(wire, 8, protowire.Fixed32Type)
	wire = protowire.AppendFixed32(wire, 1)
	wire = protowire.AppendTag(wire, 9, protowire.Fixed64Type)
	wire = protowire.AppendFixed64(wire, 1)
	wire = protowire.AppendTag(wire, 10, protowire.StartGroupType)
	wire = protowire.AppendTag(wire, 1, protowire.BytesType)
	wire = protowire.AppendBytes(wire, []byte("in a group"))
	wire = protowire.AppendTag(wire, 10, protowire.EndGroupType)
	wire = protowire.AppendTag(wire, 2, protowire.VarintType) // image with the wrong wire type: unknown
	wire = protowire.AppendVarint(wire, 1)
	wire = protowire.AppendTag(wire, 1, protowire.BytesType)
	wire = protowire.AppendBytes(wire, []byte("second"))
	wire = protowire.AppendTag(wire, 2, protowire.BytesType)
	wire = protowire.AppendString(wire, "img")

	gen := new(pb.EvaluateFunctionRequest)
	require.NoError(t, proto.Unmarshal(wire, gen))
	var got Request
	require.NoError(t, (codec{}).Unmarshal(split(wire, 5, 11), &got))
	require.Equal(t, gen.GetImage(), got.Image, "image, against what the generated code reads")
	require.Equal(t, string(gen.GetResourceList()), string(got.ResourceList.Materialize()), "resource list, against what the generated code reads")
}

func TestMalformedRefused(t *testing.T) {
	good, _ := proto.Marshal(&pb.EvaluateFunctionRequest{Image: "a", ResourceList: []byte("kind: ResourceList")})
	for name, wire := range map[string][]byte{
		"truncated field":    good[:len(good)-1],
		"truncated varint":   {0x0a, 0x80},
		"field number 0":     {0x02, 0x00},
		"reserved wire type": {0x0e},
		"bad utf-8 image":    append(protowire.AppendTag(nil, 2, protowire.BytesType), 1, 0xff),
		"unended group":      protowire.AppendTag(nil, 3, protowire.StartGroupType),
		"overlong varint":    bytes.Repeat([]byte{0xff}, 11),
	} {
		t.Run(name, func(t *testing.T) {
			require.Error(t, proto.Unmarshal(wire, new(pb.EvaluateFunctionRequest)), "generated code accepts %x; the test case is wrong", wire)
			require.Error(t, (codec{}).Unmarshal(split(wire, 1), new(Request)), "accepted %x", wire)
		})
	}
}

func TestOtherMessagesUseProto(t *testing.T) {
	in := &pb.EvaluateFunctionRequest{Image: "x"}
	out, err := (codec{}).Marshal(in)
	require.NoError(t, err)
	back := new(pb.EvaluateFunctionRequest)
	require.NoError(t, (codec{}).Unmarshal(out, back))
	require.Equal(t, "x", back.GetImage(), "got %v", back)
}

// FuzzDecode checks that the codec reads every input as the generated code
// does: the same fields, and an error exactly when it errs.
func FuzzDecode(f *testing.F) {
	good, _ := proto.Marshal(&pb.EvaluateFunctionRequest{Image: "set-namespace:v0.4.5", ResourceList: []byte("kind: ResourceList\n")})
	f.Add(good, 3)
	f.Add([]byte{0x0a, 0x00, 0x12, 0x01, 'a'}, 1)
	f.Add([]byte{0x1b, 0x0a, 0x00, 0x1c}, 2)
	f.Fuzz(func(t *testing.T, wire []byte, cut int) {
		gen := new(pb.EvaluateFunctionRequest)
		genErr := proto.Unmarshal(wire, gen)
		var got Request
		err := (codec{}).Unmarshal(split(wire, cut), &got)
		require.Equal(t, genErr == nil, err == nil, "codec error %v, generated code error %v", err, genErr)
		if err == nil {
			require.Equal(t, gen.GetImage(), got.Image, "image, against what the generated code reads")
			require.Equal(t, gen.GetTag(), got.Tag, "tag, against what the generated code reads")
			require.True(t, bytes.Equal(got.ResourceList.Materialize(), gen.GetResourceList()),
				"got resource list %q, generated code reads %q", got.ResourceList.Materialize(), gen.GetResourceList())
		}
	})
}
