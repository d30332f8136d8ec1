package freeze

import (
	"reflect"
	"strings"
	"testing"
)

var gptPaths = []string{
	"embed.tokens.weight", "embed.positions.weight",
	"blocks.0.attn.qkv.weight", "blocks.1.attn.qkv.weight", "blocks.2.ln1.bias",
	"blocks.3.mlp.fc.weight", "blocks.10.mlp.fc.weight", "final_norm.weight",
}

func TestMatch(t *testing.T) {
	cases := []struct {
		patterns []string
		want     []string
	}{
		{[]string{"embed.*"}, []string{"embed.tokens.weight", "embed.positions.weight"}},
		{[]string{"blocks.0.*"}, []string{"blocks.0.attn.qkv.weight"}},
		{[]string{"blocks.[0-2].*"}, []string{"blocks.0.attn.qkv.weight", "blocks.1.attn.qkv.weight", "blocks.2.ln1.bias"}},
		{[]string{"blocks.[9-10].*"}, []string{"blocks.10.mlp.fc.weight"}},
		{[]string{"*.weight", "blocks.2.*"}, []string{"embed.tokens.weight", "embed.positions.weight", "blocks.0.attn.qkv.weight", "blocks.1.attn.qkv.weight", "blocks.2.ln1.bias", "blocks.3.mlp.fc.weight", "blocks.10.mlp.fc.weight", "final_norm.weight"}},
		{[]string{"blocks.?.mlp.*"}, []string{"blocks.3.mlp.fc.weight"}},
		{[]string{"final_norm.weight"}, []string{"final_norm.weight"}},
	}
	for _, c := range cases {
		got, err := Match(gptPaths, c.patterns...)
		if err != nil {
			t.Errorf("%v: %v", c.patterns, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v matched %v, want %v", c.patterns, got, c.want)
		}
	}
}

func TestMatchErrors(t *testing.T) {
	cases := []struct {
		pattern string
		want    string
	}{
		{"block.0.*", "closest: blocks.0.attn.qkv.weight"},
		{"blocks.[2-0].*", "is not [low-high]"},
		{"blocks.[0-2.*", "without ']'"},
		{"embd.*", "embed."},
	}
	for _, c := range cases {
		_, err := Match(gptPaths, c.pattern)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.pattern, err, c.want)
		}
	}
}
