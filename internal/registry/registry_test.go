package registry

import (
	"slices"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := New[func() int]("widget")
	r.Register("b", func() int { return 2 })
	r.Register("a", func() int { return 1 })
	if got := r.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Names() = %v", got)
	}
	if f, ok := r.Get("b"); !ok || f() != 2 {
		t.Errorf("Get(b): found %v, want the function returning 2", ok)
	}
	if _, ok := r.Get("c"); ok {
		t.Error("Get of an unregistered name succeeded")
	}
	for _, c := range []struct {
		name string
		f    func() int
		want string
	}{{"a", func() int { return 3 }, "twice"}, {"nil", nil, "nil widget"}} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, c.want) {
					t.Errorf("Register(%q): panic %q, want one saying %q", c.name, msg, c.want)
				}
			}()
			r.Register(c.name, c.f)
		}()
	}
}
