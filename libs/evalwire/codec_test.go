package evalwire

import (
	"bytes"
	"strings"
	"testing"

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
	want := &pb.EvaluateFunctionRequest{Image: "set-namespace:v0.4.5", ResourceList: []byte("kind: ResourceList\nitems: []\n")}
	wire, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	// Every place the transport could have cut the message.
	for cut := 0; cut <= len(wire); cut++ {
		data := split(wire, cut)
		var got Request
		if err := (codec{}).Unmarshal(data, &got); err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		data.Free() // as gRPC does after Unmarshal: got keeps its own references
		if got.Image != want.Image || string(got.ResourceList.Materialize()) != string(want.ResourceList) {
			t.Fatalf("cut %d: got %q %q", cut, got.Image, got.ResourceList.Materialize())
		}
		out, err := (codec{}).Marshal(&got)
		if err != nil {
			t.Fatal(err)
		}
		back := new(pb.EvaluateFunctionRequest)
		if err := proto.Unmarshal(out.Materialize(), back); err != nil {
			t.Fatal(err)
		}
		out.Free()
		if !proto.Equal(back, want) {
			t.Fatalf("cut %d: generated code reads %v", cut, back)
		}
		got.Free()
	}
}

func TestResponseMatchesGenerated(t *testing.T) {
	want := &pb.EvaluateFunctionResponse{ResourceList: []byte(strings.Repeat("x", 70000)), Log: []byte("done\n")}
	wire, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got Response
	if err := (codec{}).Unmarshal(split(wire, 1, 2, 3, 16384, 32768, len(wire)-3), &got); err != nil {
		t.Fatal(err)
	}
	out, err := (codec{}).Marshal(&got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Materialize(), wire) {
		t.Fatal("re-encoded response differs from the generated encoding")
	}
}

func TestEmptyFieldsLeftOut(t *testing.T) {
	out, err := (codec{}).Marshal(&Request{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("empty request encodes to %d bytes, want 0", out.Len())
	}
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
	if err := proto.Unmarshal(wire, gen); err != nil {
		t.Fatal(err)
	}
	var got Request
	if err := (codec{}).Unmarshal(split(wire, 5, 11), &got); err != nil {
		t.Fatal(err)
	}
	if got.Image != gen.GetImage() || string(got.ResourceList.Materialize()) != string(gen.GetResourceList()) {
		t.Fatalf("got %q %q, generated code reads %q %q", got.Image, got.ResourceList.Materialize(), gen.GetImage(), gen.GetResourceList())
	}
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
			if err := proto.Unmarshal(wire, new(pb.EvaluateFunctionRequest)); err == nil {
				t.Fatalf("generated code accepts %x; the test case is wrong", wire)
			}
			if err := (codec{}).Unmarshal(split(wire, 1), new(Request)); err == nil {
				t.Fatalf("accepted %x", wire)
			}
		})
	}
}

func TestOtherMessagesUseProto(t *testing.T) {
	in := &pb.EvaluateFunctionRequest{Image: "x"}
	out, err := (codec{}).Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	back := new(pb.EvaluateFunctionRequest)
	if err := (codec{}).Unmarshal(out, back); err != nil || back.GetImage() != "x" {
		t.Fatalf("got %v, %v", back, err)
	}
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
		if (err == nil) != (genErr == nil) {
			t.Fatalf("codec error %v, generated code error %v", err, genErr)
		}
		if err == nil && (got.Image != gen.GetImage() || !bytes.Equal(got.ResourceList.Materialize(), gen.GetResourceList())) {
			t.Fatalf("got %q %q, generated code reads %q %q", got.Image, got.ResourceList.Materialize(), gen.GetImage(), gen.GetResourceList())
		}
	})
}
