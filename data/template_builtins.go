package data

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// tplGlobal is a built-in function: range, namespace, dict,
// raise_exception, strftime_now, joiner, cycler.
type tplGlobal func(r *tplRenderer, args []jinja.Value, kwargs []tplKV) (jinja.Value, error)

var tplGlobals map[string]tplGlobal

func init() {
	tplGlobals = map[string]tplGlobal{
		"range":           tplRange,
		"namespace":       tplNamespace,
		"dict":            tplDictOf,
		"raise_exception": tplRaise,
		"strftime_now":    tplStrftimeNow,
		"joiner":          tplJoiner,
		"cycler":          tplCycler,
	}
}

// tplRange is Python's range, built as a list within the limits.
func tplRange(r *tplRenderer, args []jinja.Value, kwargs []tplKV) (jinja.Value, error) {
	undef := jinja.Undefined()
	if len(kwargs) > 0 || len(args) < 1 || len(args) > 3 {
		return undef, r.errf("range() takes 1 to 3 integers")
	}
	var n [3]int64
	for i, a := range args {
		if !tplIsInt(a) {
			return undef, r.errf("range(): '%s' object cannot be interpreted as an integer", tplType(a))
		}
		n[i] = tplInt(a)
	}
	start, stop, step := int64(0), n[0], int64(1)
	if len(args) > 1 {
		start, stop = n[0], n[1]
	}
	if len(args) > 2 {
		step = n[2]
	}
	if step == 0 {
		return undef, r.errf("range() arg 3 must not be zero")
	}
	var count uint64
	switch {
	case step > 0 && start < stop:
		count = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	case step < 0 && start > stop:
		count = (uint64(start)-uint64(stop)-1)/uint64(-step) + 1
	}
	if count > uint64(max(r.steps, 0)) {
		return undef, r.errf("range() of %d items is more than the %d steps the template has left (its limit for this conversation)", count, max(r.steps, 0))
	}
	if err := r.newItems(int64(count)); err != nil {
		return undef, err
	}
	items := make([]jinja.Value, count)
	v := start
	for i := range items {
		items[i] = jinja.NewInt(v)
		v += step
	}
	return jinja.NewList(items), nil
}

// tplNamespace is namespace(): a dict whose attributes the template
// may set.
func tplNamespace(r *tplRenderer, args []jinja.Value, kwargs []tplKV) (jinja.Value, error) {
	d, err := tplDictOf(r, args, kwargs)
	if err == nil {
		if r.namespaces == nil {
			r.namespaces = map[*jinja.Dict]bool{}
		}
		r.namespaces[d.AsDict()] = true
	}
	return d, err
}

// tplDictOf is dict(): a dict of a mapping given and the keyword
// arguments, in order.
func tplDictOf(r *tplRenderer, args []jinja.Value, kwargs []tplKV) (jinja.Value, error) {
	d := jinja.NewDict()
	if len(args) > 1 {
		return jinja.Undefined(), r.errf("dict() and namespace() take at most one mapping")
	}
	if err := r.newItems(int64(len(kwargs))); err != nil {
		return jinja.Undefined(), err
	}
	if len(args) == 1 {
		switch a := args[0]; {
		case a.IsDict():
			src := a.AsDict()
			if err := r.newItems(int64(len(src.Keys))); err != nil {
				return jinja.Undefined(), err
			}
			for _, k := range src.Keys {
				d.AsDict().Set(k, src.Data[k])
			}
		case a.IsList():
			for _, pair := range a.AsList().Items {
				kv, err := r.unpack(pair, 2)
				if err != nil {
					return jinja.Undefined(), err
				}
				k, err := r.str(kv[0])
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(k, kv[1])
			}
		default:
			return jinja.Undefined(), r.errf("dict(): '%s' object is not a mapping", tplType(a))
		}
	}
	for _, kv := range kwargs {
		d.AsDict().Set(kv.name, kv.v)
	}
	return d, nil
}

// tplRaise is raise_exception: the template's error, its message (at
// most 500 bytes of it) as it is, as transformers' TemplateError.
func tplRaise(r *tplRenderer, args []jinja.Value, kwargs []tplKV) (jinja.Value, error) {
	msg := "raise_exception"
	if len(args) > 0 {
		s, err := r.str(args[0])
		if err != nil {
			return jinja.Undefined(), err
		}
		msg = tplClip(s, 500)
	}
	return jinja.Undefined(), &tplError{msg: msg}
}

// clock is the time strftime_now renders and the SFT cache's key dates
// (sftKey); tests replace it.
var clock = time.Now

// tplStrftimeNow is transformers' strftime_now: the time now in a
// strftime format.
func tplStrftimeNow(r *tplRenderer, args []jinja.Value, kwargs []tplKV) (jinja.Value, error) {
	format := "%Y-%m-%d"
	if len(args) > 0 {
		s, err := r.str(args[0])
		if err != nil {
			return jinja.Undefined(), err
		}
		format = s
	}
	now := clock()
	b := &tplBuf{r: r}
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.byte(c)
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			b.str(strconv.Itoa(now.Year()))
		case 'y':
			b.str(fmt.Sprintf("%02d", now.Year()%100))
		case 'm':
			b.str(fmt.Sprintf("%02d", int(now.Month())))
		case 'd':
			b.str(fmt.Sprintf("%02d", now.Day()))
		case 'H':
			b.str(fmt.Sprintf("%02d", now.Hour()))
		case 'I':
			b.str(fmt.Sprintf("%02d", (now.Hour()+11)%12+1))
		case 'M':
			b.str(fmt.Sprintf("%02d", now.Minute()))
		case 'S':
			b.str(fmt.Sprintf("%02d", now.Second()))
		case 'p':
			b.str(now.Format("PM"))
		case 'B':
			b.str(now.Month().String())
		case 'b', 'h':
			b.str(now.Month().String()[:3])
		case 'A':
			b.str(now.Weekday().String())
		case 'a':
			b.str(now.Weekday().String()[:3])
		case 'j':
			b.str(fmt.Sprintf("%03d", now.YearDay()))
		case 'Z':
			b.str(now.Format("MST"))
		case 'z':
			b.str(now.Format("-0700"))
		case '%':
			b.byte('%')
		default:
			b.byte('%')
			b.byte(format[i])
		}
	}
	s, err := b.done()
	return jinja.NewString(s), err
}

func tplJoiner(r *tplRenderer, args []jinja.Value, kwargs []tplKV) (jinja.Value, error) {
	sep := ", "
	if len(args) > 0 {
		s, err := r.str(args[0])
		if err != nil {
			return jinja.Undefined(), err
		}
		sep = s
	}
	used := false
	return jinja.NewCallable("joiner", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		if !used {
			used = true
			return jinja.NewString(""), nil
		}
		return jinja.NewString(sep), nil
	}), nil
}

func tplCycler(r *tplRenderer, args []jinja.Value, kwargs []tplKV) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), r.errf("cycler() needs at least one item")
	}
	items := slices.Clone(args)
	i := 0
	d := jinja.NewDict()
	dd := d.AsDict()
	dd.Set("current", items[0])
	dd.Set("next", jinja.NewCallable("cycler.next", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		v := items[i]
		i = (i + 1) % len(items)
		dd.Set("current", items[i])
		return v, nil
	}))
	dd.Set("reset", jinja.NewCallable("cycler.reset", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		i = 0
		dd.Set("current", items[0])
		return jinja.None(), nil
	}))
	return d, nil
}

// tplArgs reads a call's arguments by position or keyword.
type tplArgs struct {
	r    *tplRenderer
	what string
	pos  []jinja.Value
	kw   []tplKV
}

// get returns argument i (positional) or name (keyword).
func (a tplArgs) get(i int, name string) (jinja.Value, bool) {
	if i >= 0 && i < len(a.pos) {
		return a.pos[i], true
	}
	for _, kv := range a.kw {
		if kv.name == name {
			return kv.v, true
		}
	}
	return jinja.Undefined(), false
}

// str returns argument i or name as a string, def where it is missing or
// none.
func (a tplArgs) str(i int, name, def string) (string, error) {
	v, ok := a.get(i, name)
	if !ok || v.IsNone() || v.IsUndefined() {
		return def, nil
	}
	return a.r.str(v)
}

// int returns argument i or name as an integer, def where it is missing.
func (a tplArgs) int(i int, name string, def int64) (int64, error) {
	v, ok := a.get(i, name)
	if !ok || v.IsNone() || v.IsUndefined() {
		return def, nil
	}
	if !tplIsInt(v) {
		return 0, a.r.errf("%s: %s must be an integer, not %s", a.what, name, tplType(v))
	}
	return tplInt(v), nil
}

func (a tplArgs) bool(i int, name string, def bool) bool {
	v, ok := a.get(i, name)
	if !ok || v.IsUndefined() {
		return def
	}
	return tplTruthy(v)
}

// tplPySpace says whether c is whitespace to Python's str.isspace.
func tplPySpace(c rune) bool {
	return unicode.IsSpace(c) || c >= 0x1c && c <= 0x1f
}

// strip is Python's strip, lstrip or rstrip (which: "", "l", "r").
func tplStrip(s, which string, chars *string) string {
	cut := tplPySpace
	if chars != nil {
		set := *chars
		cut = func(c rune) bool { return strings.ContainsRune(set, c) }
	}
	if which != "r" {
		s = strings.TrimLeftFunc(s, cut)
	}
	if which != "l" {
		s = strings.TrimRightFunc(s, cut)
	}
	return s
}

// tplTitle is Python's str.title.
func tplTitle(s string) string {
	var b strings.Builder
	prev := false
	for _, c := range s {
		cased := unicode.IsUpper(c) || unicode.IsLower(c) || unicode.IsTitle(c)
		switch {
		case cased && prev:
			b.WriteRune(unicode.ToLower(c))
		case cased:
			b.WriteRune(unicode.ToTitle(c))
		default:
			b.WriteRune(c)
		}
		prev = cased
	}
	return b.String()
}

// tplCapitalize is Python's str.capitalize.
func tplCapitalize(s string) string {
	c, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToTitle(c)) + strings.ToLower(s[n:])
}

// tplRuneIndex turns byte offset i of s into a character offset.
func tplRuneIndex(s string, i int) int64 {
	if i < 0 {
		return -1
	}
	return int64(utf8.RuneCountInString(s[:i]))
}

// method calls a method of a string, a list or a dict.
func (r *tplRenderer) method(obj jinja.Value, name string, args []jinja.Value, kwargs []tplKV) (jinja.Value, error) {
	undef := jinja.Undefined()
	a := tplArgs{r: r, what: tplType(obj) + "." + name + "()", pos: args, kw: kwargs}
	switch {
	case obj.IsString():
		s := obj.AsString()
		if err := r.spend(int64(len(s))); err != nil {
			return undef, err
		}
		return r.strMethod(s, name, a)
	case obj.IsList():
		return r.listMethod(obj.AsList(), name, a)
	case obj.IsDict():
		return r.dictMethod(obj.AsDict(), name, a)
	case obj.IsUndefined():
		return undef, r.errf("cannot call %s() of an undefined value", name)
	}
	return undef, r.errf("'%s' object has no method %s()", tplType(obj), tplClip(name, 40))
}

func (r *tplRenderer) strMethod(s, name string, a tplArgs) (jinja.Value, error) {
	undef := jinja.Undefined()
	str := func(s string) (jinja.Value, error) {
		if err := r.newString(int64(len(s))); err != nil {
			return undef, err
		}
		return jinja.NewString(s), nil
	}
	strArg := func(i int, name string) (string, error) {
		v, ok := a.get(i, name)
		if !ok {
			return "", r.errf("%s needs its argument %s", a.what, name)
		}
		if !v.IsString() {
			return "", r.errf("%s: %s must be a string, not %s", a.what, name, tplType(v))
		}
		return v.AsString(), nil
	}
	switch name {
	case "strip", "lstrip", "rstrip":
		var chars *string
		if v, ok := a.get(0, "chars"); ok && !v.IsNone() {
			c, err := r.str(v)
			if err != nil {
				return undef, err
			}
			chars = &c
		}
		return jinja.NewString(tplStrip(s, strings.TrimSuffix(name, "strip"), chars)), nil
	case "upper":
		return str(strings.ToUpper(s))
	case "lower":
		return str(strings.ToLower(s))
	case "title":
		return str(tplTitle(s))
	case "capitalize":
		return str(tplCapitalize(s))
	case "swapcase":
		return str(strings.Map(func(c rune) rune {
			if unicode.IsUpper(c) {
				return unicode.ToLower(c)
			}
			return unicode.ToUpper(c)
		}, s))
	case "split", "rsplit":
		return r.split(s, a, name == "rsplit")
	case "splitlines":
		lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		return r.strList(lines)
	case "startswith", "endswith":
		v, ok := a.get(0, "prefix")
		if !ok {
			return undef, r.errf("%s needs a prefix", a.what)
		}
		var options []jinja.Value
		if v.IsList() {
			options = v.AsList().Items
		} else {
			options = []jinja.Value{v}
		}
		if len(a.pos) > 1 {
			sub, err := r.evalSubstring(s, a)
			if err != nil {
				return undef, err
			}
			s = sub
		}
		for _, o := range options {
			if !o.IsString() {
				return undef, r.errf("%s: the prefix must be a string, not %s", a.what, tplType(o))
			}
			if name == "startswith" && strings.HasPrefix(s, o.AsString()) || name == "endswith" && strings.HasSuffix(s, o.AsString()) {
				return jinja.NewBool(true), nil
			}
		}
		return jinja.NewBool(false), nil
	case "replace":
		old, err := strArg(0, "old")
		if err != nil {
			return undef, err
		}
		nw, err := strArg(1, "new")
		if err != nil {
			return undef, err
		}
		count, err := a.int(2, "count", -1)
		if err != nil {
			return undef, err
		}
		return r.replace(s, old, nw, count)
	case "count", "find", "rfind", "index", "rindex":
		sub, err := strArg(0, "sub")
		if err != nil {
			return undef, err
		}
		if len(a.pos) > 1 {
			return undef, r.errf("%s with a start or an end is not supported", a.what)
		}
		switch name {
		case "count":
			if sub == "" {
				return jinja.NewInt(int64(utf8.RuneCountInString(s)) + 1), nil
			}
			return jinja.NewInt(int64(strings.Count(s, sub))), nil
		case "find", "index":
			i := tplRuneIndex(s, strings.Index(s, sub))
			if i < 0 && name == "index" {
				return undef, r.errf("substring not found")
			}
			return jinja.NewInt(i), nil
		}
		i := strings.LastIndex(s, sub)
		if i < 0 && name == "rindex" {
			return undef, r.errf("substring not found")
		}
		return jinja.NewInt(tplRuneIndex(s, i)), nil
	case "join":
		v, ok := a.get(0, "iterable")
		if !ok {
			return undef, r.errf("%s needs the items to join", a.what)
		}
		items, err := r.iterate(v)
		if err != nil {
			return undef, err
		}
		return r.join(items, s, "")
	case "format":
		return r.strFormat(s, a)
	case "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace", "islower", "isupper":
		if s == "" {
			return jinja.NewBool(false), nil
		}
		cased := false
		for _, c := range s {
			ok := true
			switch name {
			case "isdigit", "isdecimal", "isnumeric":
				ok = unicode.IsDigit(c) || name == "isnumeric" && unicode.IsNumber(c)
			case "isalpha":
				ok = unicode.IsLetter(c)
			case "isalnum":
				ok = unicode.IsLetter(c) || unicode.IsNumber(c)
			case "isspace":
				ok = tplPySpace(c)
			case "islower":
				ok = !unicode.IsUpper(c) && !unicode.IsTitle(c)
				cased = cased || unicode.IsLower(c)
			case "isupper":
				ok = !unicode.IsLower(c) && !unicode.IsTitle(c)
				cased = cased || unicode.IsUpper(c)
			}
			if !ok {
				return jinja.NewBool(false), nil
			}
		}
		if name == "islower" || name == "isupper" {
			return jinja.NewBool(cased), nil
		}
		return jinja.NewBool(true), nil
	case "center", "ljust", "rjust", "zfill":
		width, err := a.int(0, "width", 0)
		if err != nil {
			return undef, err
		}
		fill := " "
		if name == "zfill" {
			fill = "0"
		} else if f, err := a.str(1, "fillchar", " "); err != nil {
			return undef, err
		} else if utf8.RuneCountInString(f) != 1 {
			return undef, r.errf("%s: the fill character must be exactly one character long", a.what)
		} else {
			fill = f
		}
		return r.pad(s, width, fill, name)
	case "removeprefix", "removesuffix":
		x, err := strArg(0, "prefix")
		if err != nil {
			return undef, err
		}
		if name == "removeprefix" {
			return jinja.NewString(strings.TrimPrefix(s, x)), nil
		}
		return jinja.NewString(strings.TrimSuffix(s, x)), nil
	case "partition", "rpartition":
		sep, err := strArg(0, "sep")
		if err != nil {
			return undef, err
		}
		if sep == "" {
			return undef, r.errf("empty separator")
		}
		var parts []string
		i := strings.Index(s, sep)
		if name == "rpartition" {
			i = strings.LastIndex(s, sep)
		}
		switch {
		case i >= 0:
			parts = []string{s[:i], sep, s[i+len(sep):]}
		case name == "partition":
			parts = []string{s, "", ""}
		default:
			parts = []string{"", "", s}
		}
		return r.strList(parts)
	}
	return undef, r.errf("'str' object has no method %s()", tplClip(name, 40))
}

// evalSubstring is s[start:end] of startswith's and endswith's optional
// arguments.
func (r *tplRenderer) evalSubstring(s string, a tplArgs) (string, error) {
	var idx [2]*int64
	for i := range 2 {
		v, ok := a.get(i+1, "")
		if !ok || v.IsNone() {
			continue
		}
		if !tplIsInt(v) {
			return "", r.errf("%s: slice indices must be integers or none", a.what)
		}
		n := tplInt(v)
		idx[i] = &n
	}
	runes := []rune(s)
	from, _, count := tplSliceIndices(int64(len(runes)), idx[0], idx[1], nil)
	return string(runes[from : from+count]), nil
}

// strList returns strings as a list.
func (r *tplRenderer) strList(parts []string) (jinja.Value, error) {
	if err := r.newItems(int64(len(parts))); err != nil {
		return jinja.Undefined(), err
	}
	items := make([]jinja.Value, len(parts))
	for i, p := range parts {
		items[i] = jinja.NewString(p)
	}
	return jinja.NewList(items), nil
}

// split is Python's str.split and rsplit.
func (r *tplRenderer) split(s string, a tplArgs, right bool) (jinja.Value, error) {
	undef := jinja.Undefined()
	sep, hasSep := a.get(0, "sep")
	maxsplit, err := a.int(1, "maxsplit", -1)
	if err != nil {
		return undef, err
	}
	if !hasSep || sep.IsNone() {
		fields := strings.FieldsFunc(s, tplPySpace)
		if maxsplit >= 0 && int64(len(fields)) > maxsplit+1 {
			// The first (or last) maxsplit fields, and the rest as it is.
			if right {
				rest := s
				var tail []string
				for range maxsplit {
					rest = strings.TrimRightFunc(rest, tplPySpace)
					i := strings.LastIndexFunc(rest, tplPySpace)
					tail = append(tail, rest[i+1:])
					rest = rest[:i+1]
				}
				slices.Reverse(tail)
				fields = append([]string{strings.TrimRightFunc(rest, tplPySpace)}, tail...)
			} else {
				rest := s
				var head []string
				for range maxsplit {
					rest = strings.TrimLeftFunc(rest, tplPySpace)
					i := strings.IndexFunc(rest, tplPySpace)
					head = append(head, rest[:i])
					rest = rest[i:]
				}
				fields = append(head, strings.TrimLeftFunc(rest, tplPySpace))
			}
		}
		return r.strList(fields)
	}
	if !sep.IsString() {
		return undef, r.errf("%s: the separator must be a string, not %s", a.what, tplType(sep))
	}
	t := sep.AsString()
	if t == "" {
		return undef, r.errf("empty separator")
	}
	n := int64(strings.Count(s, t)) + 1
	if maxsplit >= 0 {
		n = min(n, maxsplit+1)
	}
	if err := r.newItems(n); err != nil {
		return undef, err
	}
	if !right || maxsplit < 0 {
		return r.strList(strings.SplitN(s, t, int(n)))
	}
	var parts []string
	rest := s
	for int64(len(parts)) < n-1 {
		i := strings.LastIndex(rest, t)
		parts = append(parts, rest[i+len(t):])
		rest = rest[:i]
	}
	parts = append(parts, rest)
	slices.Reverse(parts)
	return r.strList(parts)
}

// replace is Python's str.replace (count < 0: all), its result's size
// checked before it is built.
func (r *tplRenderer) replace(s, old, nw string, count int64) (jinja.Value, error) {
	n := int64(strings.Count(s, old))
	if old == "" {
		n = int64(utf8.RuneCountInString(s)) + 1
	}
	if count >= 0 {
		n = min(n, count)
	}
	size := int64(len(s))
	if n > 0 {
		if d := int64(len(nw)) - int64(len(old)); d > 0 && n > (r.lim.Output-size)/d+1 {
			return jinja.Undefined(), r.tooLong(size + n*d)
		}
		size += n * (int64(len(nw)) - int64(len(old)))
	}
	if err := r.newString(size); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(strings.Replace(s, old, nw, int(n))), nil
}

// join joins items' strings (or their attribute attr) with sep.
func (r *tplRenderer) join(items []jinja.Value, sep, attr string) (jinja.Value, error) {
	undef := jinja.Undefined()
	if len(items) == 0 {
		return jinja.NewString(""), nil
	}
	if int64(len(sep)) > r.lim.Output/int64(len(items)) {
		return undef, r.tooLong(int64(len(sep)) * int64(len(items)))
	}
	parts := make([]string, len(items))
	size := int64(len(sep)) * int64(len(items)-1)
	for i, it := range items {
		if err := r.step(); err != nil {
			return undef, err
		}
		if attr != "" {
			v, err := r.attrPath(it, attr)
			if err != nil {
				return undef, err
			}
			it = v
		}
		s, err := r.str(it)
		if err != nil {
			return undef, err
		}
		parts[i] = s
		size += int64(len(s))
		if size > r.lim.Output {
			return undef, r.tooLong(size)
		}
	}
	if err := r.newString(size); err != nil {
		return undef, err
	}
	return jinja.NewString(strings.Join(parts, sep)), nil
}

// pad is Python's center, ljust, rjust and zfill.
func (r *tplRenderer) pad(s string, width int64, fill, how string) (jinja.Value, error) {
	n := int64(utf8.RuneCountInString(s))
	if width <= n {
		return jinja.NewString(s), nil
	}
	if width > r.lim.Output {
		return jinja.Undefined(), r.tooLong(width)
	}
	marg := width - n
	if err := r.newString(int64(len(s)) + marg*int64(len(fill))); err != nil {
		return jinja.Undefined(), err
	}
	left := int64(0)
	switch how {
	case "center":
		left = marg/2 + (marg & width & 1)
	case "rjust":
		left = marg
	case "zfill":
		if s != "" && (s[0] == '+' || s[0] == '-') {
			return jinja.NewString(s[:1] + strings.Repeat("0", int(marg)) + s[1:]), nil
		}
		left = marg
	}
	return jinja.NewString(strings.Repeat(fill, int(left)) + s + strings.Repeat(fill, int(marg-left))), nil
}

// tplMutators are the methods that change a list or a dict, which
// transformers' ImmutableSandboxedEnvironment refuses (and which would
// change the conversation the caller renders again).
var tplMutators = map[string]bool{
	"append": true, "extend": true, "insert": true, "pop": true, "remove": true, "reverse": true, "sort": true, "clear": true,
	"popitem": true, "setdefault": true, "update": true,
}

func (r *tplRenderer) listMethod(l *jinja.List, name string, a tplArgs) (jinja.Value, error) {
	undef := jinja.Undefined()
	if tplMutators[name] {
		return undef, r.errf("%s would change a list, which chat templates may not (transformers renders them in an immutable sandbox)", a.what)
	}
	switch name {
	case "index", "count":
		v, ok := a.get(0, "value")
		if !ok {
			return undef, r.errf("%s needs a value", a.what)
		}
		count := int64(0)
		for i, it := range l.Items {
			eq, err := r.equal(it, v, 0)
			if err != nil {
				return undef, err
			}
			if eq {
				if name == "index" {
					return jinja.NewInt(int64(i)), nil
				}
				count++
			}
		}
		if name == "index" {
			return undef, r.errf("the value is not in the list")
		}
		return jinja.NewInt(count), nil
	case "copy":
		if err := r.newItems(int64(len(l.Items))); err != nil {
			return undef, err
		}
		return jinja.NewList(slices.Clone(l.Items)), nil
	}
	return undef, r.errf("'list' object has no method %s()", tplClip(name, 40))
}

func (r *tplRenderer) dictMethod(d *jinja.Dict, name string, a tplArgs) (jinja.Value, error) {
	undef := jinja.Undefined()
	if tplMutators[name] {
		return undef, r.errf("%s would change a dict, which chat templates may not (transformers renders them in an immutable sandbox; a namespace()'s attributes can be set)", a.what)
	}
	switch name {
	case "items", "keys", "values":
		if err := r.newItems(int64(len(d.Keys))); err != nil {
			return undef, err
		}
		items := make([]jinja.Value, len(d.Keys))
		for i, k := range d.Keys {
			switch name {
			case "items":
				items[i] = jinja.NewList([]jinja.Value{jinja.NewString(k), d.Data[k]})
			case "keys":
				items[i] = jinja.NewString(k)
			default:
				items[i] = d.Data[k]
			}
		}
		return jinja.NewList(items), nil
	case "get":
		kv, ok := a.get(0, "key")
		if !ok {
			return undef, r.errf("%s needs a key", a.what)
		}
		k, err := r.str(kv)
		if err != nil {
			return undef, err
		}
		if v, found := d.Get(k); found {
			return v, nil
		}
		if def, ok := a.get(1, "default"); ok {
			return def, nil
		}
		return jinja.None(), nil
	case "copy":
		if err := r.newItems(int64(len(d.Keys))); err != nil {
			return undef, err
		}
		c := jinja.NewDict()
		for _, k := range d.Keys {
			c.AsDict().Set(k, d.Data[k])
		}
		return c, nil
	}
	return undef, r.errf("'dict' object has no method %s()", tplClip(name, 40))
}

// attrPath is an item's attribute (a dotted path of dict keys and list
// indices), as filters' attribute= argument; undefined where missing.
func (r *tplRenderer) attrPath(v jinja.Value, path string) (jinja.Value, error) {
	for part := range strings.SplitSeq(path, ".") {
		if err := r.step(); err != nil {
			return jinja.Undefined(), err
		}
		var key jinja.Value
		if n, err := strconv.ParseInt(part, 10, 64); err == nil && v.IsList() {
			key = jinja.NewInt(n)
		} else {
			key = jinja.NewString(part)
		}
		var err error
		if v, err = r.item(v, key); err != nil {
			return jinja.Undefined(), err
		}
	}
	return v, nil
}

// applyFilter applies filter f (its arguments evaluated in sc) to v.
func (r *tplRenderer) applyFilter(f *tplFilter, v jinja.Value, sc *tplScope) (jinja.Value, error) {
	args, kwargs, err := r.evalArgs(f.args, f.kwargs, sc)
	if err != nil {
		return jinja.Undefined(), err
	}
	if err := r.step(); err != nil {
		return jinja.Undefined(), err
	}
	return r.filter(f.name, v, args, kwargs)
}

// filter applies the built-in filter name to v.
func (r *tplRenderer) filter(name string, v jinja.Value, args []jinja.Value, kwargs []tplKV) (jinja.Value, error) {
	undef := jinja.Undefined()
	a := tplArgs{r: r, what: "|" + name, pos: args, kw: kwargs}
	str := func() (string, error) {
		s, err := r.str(v)
		if err != nil {
			return "", err
		}
		return s, r.spend(int64(len(s)))
	}
	newStr := func(s string) (jinja.Value, error) {
		if err := r.newString(int64(len(s))); err != nil {
			return undef, err
		}
		return jinja.NewString(s), nil
	}
	switch name {
	case "safe", "forceescape_none":
		return v, nil
	case "string":
		s, err := r.str(v)
		return jinja.NewString(s), err
	case "pprint":
		b := &tplBuf{r: r}
		b.repr(v, 0)
		s, err := b.done()
		return jinja.NewString(s), err
	case "tojson":
		return r.tojson(v, a)
	case "fromjson", "from_json":
		s, err := str()
		if err != nil {
			return undef, err
		}
		if err := r.newItems(int64(len(s))/8 + 1); err != nil {
			return undef, err
		}
		if d := tplJSONDepth(s); d > tplMaxValueDepth {
			return undef, r.errf("|fromjson: the JSON nests %d deep, more than the limit of %d", d, tplMaxValueDepth)
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(s)))
		dec.UseNumber()
		out, err := jsonValue(dec)
		if err != nil {
			return undef, r.errf("|fromjson: %v", err)
		}
		return out, nil
	case "trim":
		s, err := str()
		if err != nil {
			return undef, err
		}
		var chars *string
		if c, ok := a.get(0, "chars"); ok && !c.IsNone() {
			cs, err := r.str(c)
			if err != nil {
				return undef, err
			}
			chars = &cs
		}
		return jinja.NewString(tplStrip(s, "", chars)), nil
	case "upper", "lower", "capitalize":
		s, err := str()
		if err != nil {
			return undef, err
		}
		switch name {
		case "upper":
			return newStr(strings.ToUpper(s))
		case "lower":
			return newStr(strings.ToLower(s))
		}
		return newStr(tplCapitalize(s))
	case "title":
		s, err := str()
		if err != nil {
			return undef, err
		}
		var b strings.Builder
		start := true
		for _, c := range s {
			switch {
			case unicode.IsSpace(c) || strings.ContainsRune("-({[<", c):
				b.WriteRune(c)
				start = true
			case start:
				b.WriteRune(unicode.ToTitle(c))
				start = false
			default:
				b.WriteRune(unicode.ToLower(c))
			}
		}
		return newStr(b.String())
	case "replace":
		s, err := str()
		if err != nil {
			return undef, err
		}
		old, err := a.str(0, "old", "")
		if err != nil {
			return undef, err
		}
		nw, err := a.str(1, "new", "")
		if err != nil {
			return undef, err
		}
		if _, ok := a.get(1, "new"); !ok {
			return undef, r.errf("|replace needs the old and the new string")
		}
		count, err := a.int(2, "count", -1)
		if err != nil {
			return undef, err
		}
		return r.replace(s, old, nw, count)
	case "center":
		s, err := str()
		if err != nil {
			return undef, err
		}
		width, err := a.int(0, "width", 80)
		if err != nil {
			return undef, err
		}
		return r.pad(s, width, " ", "center")
	case "indent":
		return r.indent(v, a)
	case "truncate":
		return r.truncate(v, a)
	case "wordcount":
		s, err := str()
		if err != nil {
			return undef, err
		}
		return jinja.NewInt(int64(len(strings.FieldsFunc(s, func(c rune) bool {
			return !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '_'
		})))), nil
	case "escape", "e", "forceescape":
		s, err := str()
		if err != nil {
			return undef, err
		}
		n := int64(len(s)) + 4*int64(strings.Count(s, "&")+strings.Count(s, "<")+strings.Count(s, ">")+strings.Count(s, `"`)+strings.Count(s, "'"))
		if err := r.newString(n); err != nil {
			return undef, err
		}
		return jinja.NewString(strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)), nil
	case "format":
		s, err := str()
		if err != nil {
			return undef, err
		}
		if len(args) > 0 && len(kwargs) > 0 {
			return undef, r.errf("|format takes positional or keyword arguments, not both")
		}
		if len(kwargs) > 0 {
			d, err := tplDictOf(r, nil, kwargs)
			if err != nil {
				return undef, err
			}
			return r.percentFormat(s, d, false)
		}
		return r.percentFormat(s, jinja.NewList(args), true)
	case "length", "count":
		switch {
		case v.IsString():
			if err := r.spend(int64(len(v.AsString()))); err != nil {
				return undef, err
			}
			return jinja.NewInt(int64(utf8.RuneCountInString(v.AsString()))), nil
		case v.IsList():
			return jinja.NewInt(int64(len(v.AsList().Items))), nil
		case v.IsDict():
			return jinja.NewInt(int64(len(v.AsDict().Keys))), nil
		case v.IsUndefined(), v.IsNone():
			return jinja.NewInt(0), nil
		}
		return undef, r.errf("object of type '%s' has no len()", tplType(v))
	case "first", "last":
		if v.IsUndefined() || v.IsNone() {
			return undef, nil
		}
		if v.IsString() && name == "first" {
			c, n := utf8.DecodeRuneInString(v.AsString())
			if n == 0 {
				return undef, nil
			}
			return jinja.NewString(string(c)), nil
		}
		if v.IsString() {
			c, n := utf8.DecodeLastRuneInString(v.AsString())
			if n == 0 {
				return undef, nil
			}
			return jinja.NewString(string(c)), nil
		}
		items, err := r.iterate(v)
		if err != nil || len(items) == 0 {
			return undef, err
		}
		if name == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil
	case "list":
		items, err := r.iterate(v)
		if err != nil {
			return undef, err
		}
		if err := r.newItems(int64(len(items))); err != nil {
			return undef, err
		}
		return jinja.NewList(slices.Clone(items)), nil
	case "reverse":
		if v.IsString() {
			runes := []rune(v.AsString())
			slices.Reverse(runes)
			return newStr(string(runes))
		}
		items, err := r.iterate(v)
		if err != nil {
			return undef, err
		}
		if err := r.newItems(int64(len(items))); err != nil {
			return undef, err
		}
		out := slices.Clone(items)
		slices.Reverse(out)
		return jinja.NewList(out), nil
	case "join":
		items, err := r.iterate(v)
		if err != nil {
			return undef, err
		}
		sep, err := a.str(0, "d", "")
		if err != nil {
			return undef, err
		}
		attr, err := a.str(1, "attribute", "")
		if err != nil {
			return undef, err
		}
		return r.join(items, sep, attr)
	case "default", "d":
		def, ok := a.get(0, "default_value")
		if !ok {
			def = jinja.NewString("")
		}
		if v.IsUndefined() || a.bool(1, "boolean", false) && !tplTruthy(v) {
			return def, nil
		}
		return v, nil
	case "int":
		return r.toInt(v, a)
	case "float":
		return r.toFloat(v, a)
	case "abs":
		switch {
		case v.IsFloat():
			return jinja.NewFloat(math.Abs(v.AsFloat())), nil
		case tplIsInt(v):
			n := tplInt(v)
			if n == math.MinInt64 {
				return undef, r.overflow()
			}
			return jinja.NewInt(max(n, -n)), nil
		}
		return undef, r.errf("bad operand type for abs(): '%s'", tplType(v))
	case "round":
		prec, err := a.int(0, "precision", 0)
		if err != nil {
			return undef, err
		}
		method, err := a.str(1, "method", "common")
		if err != nil {
			return undef, err
		}
		if !tplIsNumber(v) {
			return undef, r.errf("|round of '%s'", tplType(v))
		}
		if tplIsInt(v) && method == "common" && prec >= 0 {
			return jinja.NewFloat(float64(tplInt(v))), nil
		}
		p := math.Pow(10, float64(max(min(prec, 300), -300)))
		x := tplFloat(v) * p
		switch method {
		case "common":
			x = math.RoundToEven(x)
		case "ceil":
			x = math.Ceil(x)
		case "floor":
			x = math.Floor(x)
		default:
			return undef, r.errf("|round: method must be common, ceil or floor")
		}
		return jinja.NewFloat(x / p), nil
	case "items":
		switch {
		case v.IsUndefined():
			return jinja.NewList(nil), nil
		case !v.IsDict():
			return undef, r.errf("Can only get item pairs from a mapping.")
		}
		return r.dictMethod(v.AsDict(), "items", a)
	case "dictsort":
		if !v.IsDict() {
			return undef, r.errf("|dictsort needs a dict, not %s", tplType(v))
		}
		pairs, err := r.dictMethod(v.AsDict(), "items", a)
		if err != nil {
			return undef, err
		}
		by, err := a.str(1, "by", "key")
		if err != nil {
			return undef, err
		}
		at := 0
		if by == "value" {
			at = 1
		}
		items := slices.Clone(pairs.AsList().Items)
		err = r.sortValues(items, a.bool(0, "case_sensitive", false), a.bool(2, "reverse", false), func(x jinja.Value) (jinja.Value, error) {
			return x.AsList().Items[at], nil
		})
		return jinja.NewList(items), err
	case "sort":
		items, err := r.iterate(v)
		if err != nil {
			return undef, err
		}
		if err := r.newItems(int64(len(items))); err != nil {
			return undef, err
		}
		items = slices.Clone(items)
		attr, err := a.str(2, "attribute", "")
		if err != nil {
			return undef, err
		}
		err = r.sortValues(items, a.bool(1, "case_sensitive", false), a.bool(0, "reverse", false), func(x jinja.Value) (jinja.Value, error) {
			if attr == "" {
				return x, nil
			}
			return r.attrPath(x, attr)
		})
		return jinja.NewList(items), err
	case "unique":
		items, err := r.iterate(v)
		if err != nil {
			return undef, err
		}
		attr, err := a.str(1, "attribute", "")
		if err != nil {
			return undef, err
		}
		caseSensitive := a.bool(0, "case_sensitive", false)
		seen := map[string]bool{}
		var out []jinja.Value
		for _, it := range items {
			k := it
			if attr != "" {
				if k, err = r.attrPath(it, attr); err != nil {
					return undef, err
				}
			}
			if k.IsString() && !caseSensitive {
				k = jinja.NewString(strings.ToLower(k.AsString()))
			}
			b := &tplBuf{r: r}
			b.repr(k, 0)
			key, err := b.done()
			if err != nil {
				return undef, err
			}
			if tplIsNumber(k) {
				key = strconv.FormatFloat(tplFloat(k), 'g', -1, 64)
			}
			if !seen[key] {
				seen[key] = true
				out = append(out, it)
			}
		}
		return jinja.NewList(out), r.newItems(int64(len(out)))
	case "max", "min":
		items, err := r.iterate(v)
		if err != nil || len(items) == 0 {
			return undef, err
		}
		attr, err := a.str(1, "attribute", "")
		if err != nil {
			return undef, err
		}
		caseSensitive := a.bool(0, "case_sensitive", false)
		key := func(x jinja.Value) (jinja.Value, error) {
			if attr != "" {
				var err error
				if x, err = r.attrPath(x, attr); err != nil {
					return x, err
				}
			}
			if x.IsString() && !caseSensitive {
				x = jinja.NewString(strings.ToLower(x.AsString()))
			}
			return x, nil
		}
		best := items[0]
		bk, err := key(best)
		if err != nil {
			return undef, err
		}
		for _, it := range items[1:] {
			k, err := key(it)
			if err != nil {
				return undef, err
			}
			c, err := r.compare(k, bk, "<", 0)
			if err != nil {
				return undef, err
			}
			if name == "max" && c > 0 && c != 2 || name == "min" && c < 0 {
				best, bk = it, k
			}
		}
		return best, nil
	case "sum":
		items, err := r.iterate(v)
		if err != nil {
			return undef, err
		}
		attr, err := a.str(0, "attribute", "")
		if err != nil {
			return undef, err
		}
		total, ok := a.get(1, "start")
		if !ok {
			total = jinja.NewInt(0)
		}
		for _, it := range items {
			if attr != "" {
				if it, err = r.attrPath(it, attr); err != nil {
					return undef, err
				}
			}
			if total, err = r.arith("+", total, it); err != nil {
				return undef, err
			}
		}
		return total, nil
	case "batch":
		items, err := r.iterate(v)
		if err != nil {
			return undef, err
		}
		size, err := a.int(0, "linecount", 0)
		if err != nil {
			return undef, err
		}
		if size <= 0 {
			return undef, r.errf("|batch needs a positive size")
		}
		fill, hasFill := a.get(1, "fill_with")
		hasFill = hasFill && !fill.IsNone()
		if err := r.newItems(int64(len(items)) + size); err != nil {
			return undef, err
		}
		var out []jinja.Value
		for i := int64(0); i < int64(len(items)); i += size {
			batch := slices.Clone(items[i:min(i+size, int64(len(items)))])
			for hasFill && int64(len(batch)) < size {
				batch = append(batch, fill)
			}
			out = append(out, jinja.NewList(batch))
		}
		return jinja.NewList(out), nil
	case "attr":
		n, err := a.str(0, "name", "")
		if err != nil {
			return undef, err
		}
		if v.IsDict() {
			if x, ok := v.AsDict().Get(n); ok {
				return x, nil
			}
		}
		return undef, nil
	case "map":
		return r.mapFilter(v, a)
	case "select", "reject", "selectattr", "rejectattr":
		return r.selectFilter(name, v, a)
	}
	return undef, r.errf("no filter named %q", tplClip(name, 40))
}

// sortValues sorts items (stably) by key, strings folded to lower case
// unless caseSensitive.
func (r *tplRenderer) sortValues(items []jinja.Value, caseSensitive, reverse bool, key func(jinja.Value) (jinja.Value, error)) error {
	keys := make([]jinja.Value, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return err
		}
		if k.IsString() && !caseSensitive {
			k = jinja.NewString(strings.ToLower(k.AsString()))
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var err error
	slices.SortStableFunc(idx, func(i, j int) int {
		if err != nil {
			return 0
		}
		c, e := r.compare(keys[i], keys[j], "<", 0)
		if e != nil {
			err = e
		}
		if c == 2 {
			c = 0
		}
		if reverse {
			return -c
		}
		return c
	})
	if err != nil {
		return err
	}
	sorted := make([]jinja.Value, len(items))
	for i, k := range idx {
		sorted[i] = items[k]
	}
	copy(items, sorted)
	return nil
}

func (r *tplRenderer) mapFilter(v jinja.Value, a tplArgs) (jinja.Value, error) {
	undef := jinja.Undefined()
	items, err := r.iterate(v)
	if err != nil {
		return undef, err
	}
	if err := r.newItems(int64(len(items))); err != nil {
		return undef, err
	}
	out := make([]jinja.Value, len(items))
	if attr, ok := a.get(-1, "attribute"); ok {
		path, err := r.str(attr)
		if err != nil {
			return undef, err
		}
		def, hasDef := a.get(-1, "default")
		for i, it := range items {
			x, err := r.attrPath(it, path)
			if err != nil {
				return undef, err
			}
			if x.IsUndefined() && hasDef {
				x = def
			}
			out[i] = x
		}
		return jinja.NewList(out), nil
	}
	if len(a.pos) == 0 {
		return undef, r.errf("|map needs a filter's name or attribute=")
	}
	name, err := r.str(a.pos[0])
	if err != nil {
		return undef, err
	}
	// map('map', 'map', ...) over lists of lists nests.
	if r.maps >= tplMaxCalls {
		return undef, r.errf("|map applies |map more than %d deep (the limit)", tplMaxCalls)
	}
	r.maps++
	defer func() { r.maps-- }()
	for i, it := range items {
		if err := r.step(); err != nil {
			return undef, err
		}
		if out[i], err = r.filter(name, it, a.pos[1:], a.kw); err != nil {
			return undef, err
		}
	}
	return jinja.NewList(out), nil
}

func (r *tplRenderer) selectFilter(name string, v jinja.Value, a tplArgs) (jinja.Value, error) {
	undef := jinja.Undefined()
	items, err := r.iterate(v)
	if err != nil {
		return undef, err
	}
	byAttr := strings.HasSuffix(name, "attr")
	keep := strings.HasPrefix(name, "select")
	args := a.pos
	attr := ""
	if byAttr {
		if len(args) == 0 {
			return undef, r.errf("|%s needs an attribute", name)
		}
		if attr, err = r.str(args[0]); err != nil {
			return undef, err
		}
		args = args[1:]
	}
	test := ""
	if len(args) > 0 {
		if test, err = r.str(args[0]); err != nil {
			return undef, err
		}
		args = args[1:]
	}
	var out []jinja.Value
	for _, it := range items {
		if err := r.step(); err != nil {
			return undef, err
		}
		x := it
		if byAttr {
			if x, err = r.attrPath(it, attr); err != nil {
				return undef, err
			}
		}
		ok := tplTruthy(x)
		if test != "" {
			if ok, err = r.test(test, x, args); err != nil {
				return undef, err
			}
		}
		if ok == keep {
			out = append(out, it)
		}
	}
	return jinja.NewList(out), r.newItems(int64(len(out)))
}

// tojson is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys).
func (r *tplRenderer) tojson(v jinja.Value, a tplArgs) (jinja.Value, error) {
	undef := jinja.Undefined()
	o := &tplJSONOpts{item: ", ", key: ": ", sortKeys: a.bool(-1, "sort_keys", false)}
	if ind, ok := a.get(0, "indent"); ok && !ind.IsNone() && !ind.IsUndefined() {
		o.hasIndent, o.item = true, ","
		switch {
		case ind.IsString():
			o.indent = ind.AsString()
		case tplIsInt(ind):
			n := tplInt(ind)
			if n > 1024 {
				return undef, r.errf("|tojson: an indent of %d is over the limit of 1024", n)
			}
			o.indent = strings.Repeat(" ", int(max(n, 0)))
		default:
			return undef, r.errf("|tojson: indent must be an integer or a string")
		}
	}
	if sep, ok := a.get(-1, "separators"); ok && !sep.IsNone() {
		if !sep.IsList() || len(sep.AsList().Items) != 2 || !sep.AsList().Items[0].IsString() || !sep.AsList().Items[1].IsString() {
			return undef, r.errf("|tojson: separators must be two strings")
		}
		o.item, o.key = sep.AsList().Items[0].AsString(), sep.AsList().Items[1].AsString()
	}
	b := &tplBuf{r: r}
	b.json(v, o, 0)
	s, err := b.done()
	return jinja.NewString(s), err
}

// indent is Jinja's indent(width=4, first=False, blank=False).
func (r *tplRenderer) indent(v jinja.Value, a tplArgs) (jinja.Value, error) {
	undef := jinja.Undefined()
	s, err := r.str(v)
	if err != nil {
		return undef, err
	}
	pad := "    "
	if w, ok := a.get(0, "width"); ok {
		switch {
		case w.IsString():
			pad = w.AsString()
		case tplIsInt(w):
			n := tplInt(w)
			if n > r.lim.Output {
				return undef, r.tooLong(n)
			}
			pad = strings.Repeat(" ", int(max(n, 0)))
		default:
			return undef, r.errf("|indent: width must be an integer or a string")
		}
	}
	first, blank := a.bool(1, "first", false), a.bool(2, "blank", false)
	lines := strings.Split(strings.ReplaceAll(s+"\n", "\r\n", "\n"), "\n")
	lines = lines[:len(lines)-1]
	n := int64(len(lines)) + 1
	if int64(len(pad)) > 0 && n > r.lim.Output/int64(len(pad)) {
		return undef, r.tooLong(n * int64(len(pad)))
	}
	if err := r.newString(int64(len(s)) + n*int64(len(pad))); err != nil {
		return undef, err
	}
	var b strings.Builder
	for i, line := range lines {
		if i > 0 {
			b.WriteByte('\n')
			if blank || line != "" {
				b.WriteString(pad)
			}
		}
		b.WriteString(line)
	}
	out := b.String()
	if first {
		out = pad + out
	}
	return jinja.NewString(out), nil
}

// truncate is Jinja's truncate(length=255, killwords=False, end='...',
// leeway=5).
func (r *tplRenderer) truncate(v jinja.Value, a tplArgs) (jinja.Value, error) {
	undef := jinja.Undefined()
	s, err := r.str(v)
	if err != nil {
		return undef, err
	}
	length, err := a.int(0, "length", 255)
	if err != nil {
		return undef, err
	}
	end, err := a.str(2, "end", "...")
	if err != nil {
		return undef, err
	}
	leeway, err := a.int(3, "leeway", 5)
	if err != nil {
		return undef, err
	}
	runes := []rune(s)
	endLen := int64(utf8.RuneCountInString(end))
	if length < endLen || leeway < 0 {
		return undef, r.errf("|truncate: length must be at least the end's, and leeway not negative")
	}
	if int64(len(runes))-length <= leeway {
		return jinja.NewString(s), nil
	}
	cut := string(runes[:length-endLen])
	if !a.bool(1, "killwords", false) {
		if i := strings.LastIndexByte(cut, ' '); i >= 0 {
			cut = cut[:i]
		}
	}
	return jinja.NewString(cut + end), nil
}

// toInt is Jinja's int(default=0, base=10).
func (r *tplRenderer) toInt(v jinja.Value, a tplArgs) (jinja.Value, error) {
	def, ok := a.get(0, "default")
	if !ok {
		def = jinja.NewInt(0)
	}
	base, err := a.int(1, "base", 10)
	if err != nil {
		return jinja.Undefined(), err
	}
	switch {
	case tplIsInt(v):
		return jinja.NewInt(tplInt(v)), nil
	case v.IsFloat():
		f := v.AsFloat()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return def, nil
		}
		if f >= 0x1p63 || f < -0x1p63 {
			return jinja.Undefined(), r.overflow()
		}
		return jinja.NewInt(int64(f)), nil
	case v.IsString():
		s := strings.ReplaceAll(strings.TrimFunc(v.AsString(), tplPySpace), "_", "")
		if base != 0 && (base < 2 || base > 36) {
			base = 10
		}
		digits := strings.TrimLeft(s, "+-")
		if p := map[int64]string{16: "0x", 8: "0o", 2: "0b"}[base]; p != "" && len(digits) > 2 && strings.EqualFold(digits[:2], p) {
			s = s[:len(s)-len(digits)] + digits[2:]
		}
		if n, err := strconv.ParseInt(s, int(base), 64); err == nil {
			return jinja.NewInt(n), nil
		} else if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return jinja.Undefined(), r.overflow()
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return r.toInt(jinja.NewFloat(f), a)
		}
	}
	return def, nil
}

// toFloat is Jinja's float(default=0.0).
func (r *tplRenderer) toFloat(v jinja.Value, a tplArgs) (jinja.Value, error) {
	def, ok := a.get(0, "default")
	if !ok {
		def = jinja.NewFloat(0)
	}
	switch {
	case tplIsNumber(v):
		return jinja.NewFloat(tplFloat(v)), nil
	case v.IsString():
		s := strings.ReplaceAll(strings.TrimFunc(v.AsString(), tplPySpace), "_", "")
		if f, err := strconv.ParseFloat(s, 64); err == nil || math.IsInf(f, 0) {
			return jinja.NewFloat(f), nil
		}
	}
	return def, nil
}

// test applies the test name to v.
func (r *tplRenderer) test(name string, v jinja.Value, args []jinja.Value) (bool, error) {
	if err := r.step(); err != nil {
		return false, err
	}
	arg := func() (jinja.Value, error) {
		if len(args) < 1 {
			return jinja.Undefined(), r.errf("the test %q needs an argument", name)
		}
		return args[0], nil
	}
	switch name {
	case "defined":
		return !v.IsUndefined(), nil
	case "undefined":
		return v.IsUndefined(), nil
	case "none":
		return v.IsNone(), nil
	case "boolean":
		return v.IsBool(), nil
	case "true":
		return v.IsBool() && v.AsBool(), nil
	case "false":
		return v.IsBool() && !v.AsBool(), nil
	case "integer":
		return v.IsInt(), nil
	case "float":
		return v.IsFloat(), nil
	case "number":
		return tplIsNumber(v), nil
	case "string":
		return v.IsString(), nil
	case "mapping":
		return v.IsDict(), nil
	case "iterable":
		return v.IsList() || v.IsDict() || v.IsString(), nil
	case "sequence":
		return v.IsList() || v.IsDict() || v.IsString(), nil
	case "callable":
		if v.IsDict() {
			_, ok := v.AsDict().Get("__call__")
			return ok, nil
		}
		return v.IsCallable(), nil
	case "escaped":
		return false, nil
	case "upper", "lower":
		if !v.IsString() {
			return false, nil
		}
		res, err := r.strMethod(v.AsString(), "is"+name, tplArgs{r: r})
		return tplTruthy(res), err
	case "odd", "even", "divisibleby":
		d := jinja.NewInt(2)
		if name == "divisibleby" {
			x, err := arg()
			if err != nil {
				return false, err
			}
			d = x
		}
		m, err := r.arith("%", v, d)
		if err != nil {
			return false, err
		}
		zero := tplFloat(m) == 0
		if name == "odd" {
			return !zero, nil
		}
		return zero, nil
	case "eq", "equalto", "==", "ne", "!=":
		x, err := arg()
		if err != nil {
			return false, err
		}
		eq, err := r.equal(v, x, 0)
		return eq == (name == "eq" || name == "equalto" || name == "=="), err
	case "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=":
		x, err := arg()
		if err != nil {
			return false, err
		}
		op := map[string]string{"lt": "<", "lessthan": "<", "le": "<=", "gt": ">", "greaterthan": ">", "ge": ">="}[name]
		if op == "" {
			op = name
		}
		return r.compareOp(op, v, x)
	case "in":
		x, err := arg()
		if err != nil {
			return false, err
		}
		return r.contains(x, v)
	case "sameas":
		x, err := arg()
		if err != nil {
			return false, err
		}
		switch {
		case v.IsList() && x.IsList():
			return v.AsList() == x.AsList(), nil
		case v.IsDict() && x.IsDict():
			return v.AsDict() == x.AsDict(), nil
		case tplType(v) != tplType(x):
			return false, nil
		case v.IsNone(), v.IsUndefined():
			return true, nil
		}
		return r.equal(v, x, 0)
	}
	return false, r.errf("no test named %q", tplClip(name, 40))
}

// tplJSONDepth is how deep the arrays and objects of JSON text s nest.
func tplJSONDepth(s string) int {
	depth, deepest := 0, 0
	inString := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
