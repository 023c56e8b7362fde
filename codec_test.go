package settle

import (
	"bytes"
	"strings"
	"testing"
)

type codecRefund struct {
	Amount int               `json:"amount" msgpack:"amount"`
	ID     string            `json:"id" msgpack:"id"`
	Tags   map[string]string `json:"tags" msgpack:"tags"`
}

func TestCodecRoundTrip(t *testing.T) {
	t.Parallel()

	in := codecRefund{Amount: 1250, ID: "r-1", Tags: map[string]string{"shop": "north"}}
	for _, c := range []Codec{Msgpack, JSON} {
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			b, err := c.Marshal(in)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			var out codecRefund
			if err := c.Unmarshal(b, &out); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			if out.Amount != in.Amount || out.ID != in.ID || out.Tags["shop"] != "north" {
				t.Fatalf("got %+v, want %+v", out, in)
			}
		})
	}
}

func TestCodecNames(t *testing.T) {
	t.Parallel()

	for c, want := range map[Codec]string{Msgpack: "msgpack", JSON: "json", Raw: "raw"} {
		if got := c.Name(); got != want {
			t.Fatalf("got name %q, want %q", got, want)
		}
	}
}

func TestJSONCodecWritesJSON(t *testing.T) {
	t.Parallel()

	b, err := JSON.Marshal(codecRefund{Amount: 5, ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"amount":5,"id":"x"`) {
		t.Fatalf("got %s, want JSON text", b)
	}
}

func TestRawCodecRoundTrip(t *testing.T) {
	t.Parallel()

	t.Run("Bytes", func(t *testing.T) {
		t.Parallel()
		in := []byte{0, 1, 0xff, 'x'}
		b, err := Raw.Marshal(in)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var out []byte
		if err := Raw.Unmarshal(b, &out); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("got %v, want %v", out, in)
		}
	})
	t.Run("String", func(t *testing.T) {
		t.Parallel()
		b, err := Raw.Marshal("hello")
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var out string
		if err := Raw.Unmarshal(b, &out); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		if out != "hello" {
			t.Fatalf("got %q, want %q", out, "hello")
		}
	})
	t.Run("UnmarshalDoesNotAliasInput", func(t *testing.T) {
		t.Parallel()
		data := []byte("abc")
		var out []byte
		if err := Raw.Unmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
		data[0] = 'z'
		if string(out) != "abc" {
			t.Fatalf("got %q after changing the input, want %q", out, "abc")
		}
	})
}

func TestRawCodecRefusesOtherTypes(t *testing.T) {
	t.Parallel()

	if _, err := Raw.Marshal(42); err == nil || !strings.Contains(err.Error(), "int") {
		t.Fatalf("Marshal(42): got %v, want an error naming int", err)
	}
	if _, err := Raw.Marshal(codecRefund{}); err == nil {
		t.Fatal("Marshal(struct): got nil error, want a refusal")
	}
	var n int
	if err := Raw.Unmarshal([]byte("1"), &n); err == nil || !strings.Contains(err.Error(), "*int") {
		t.Fatalf("Unmarshal(*int): got %v, want an error naming *int", err)
	}
	var s string
	if err := Raw.Unmarshal([]byte("1"), s); err == nil {
		t.Fatal("Unmarshal(non-pointer string): got nil error, want a refusal")
	}
}

func TestMsgpackCodecRefusesGarbage(t *testing.T) {
	t.Parallel()

	var out codecRefund
	if err := Msgpack.Unmarshal([]byte{0xc1}, &out); err == nil {
		t.Fatal("got nil error decoding the never-used msgpack byte 0xc1")
	}
	if err := JSON.Unmarshal([]byte("{nope"), &out); err == nil {
		t.Fatal("got nil error decoding broken JSON")
	}
}
