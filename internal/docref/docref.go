// Package docref finds the references that the code, the scripts and the
// documents make to the project's documents in docs/, and resolves them
// against those documents' headings. Its test runs over the whole tree
// (and over the conformance cases' Spec strings, which `ucmd conformance`
// prints), so a reference to a document or section that does not exist
// fails `make check`.
//
// A reference is one of:
//   - a document: docs/NAME.md, or NAME.md followed by a section, a rule or
//     a quoted heading; NAME.md must exist in docs/;
//   - a section: §N or §N.M…, which belongs to the document named just
//     before it (a list such as "ib-cm.md §3.2, §3.4" or "§2.3 and §3.2"
//     belongs to that document as a whole), otherwise to the default
//     document of the file's directory (Defaults); the document must have a
//     heading numbered N or N.M… ("### 3.2 API calls");
//   - a rule: "rule N" or "rules N and M", the numbered rules of
//     docs/design.md ("### Rule N: …");
//   - a heading: docs/NAME.md followed by a quoted title
//     (`docs/umad.md, "Same-TID sends"`), which must be a heading of NAME.md.
//
// Anything under shared/docs/ is outside the repository and always wrong.
package docref

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Doc is what a document offers to references.
type Doc struct {
	Name     string          // "ib-cm.md"
	Sections map[string]bool // "3", "3.2"
	Rules    map[int]bool    // design rules
	Headings map[string]bool // heading text, lower case, numbers stripped
}

// Docs are the documents of one docs/ directory, by file name.
type Docs map[string]*Doc

var (
	headingRe = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*$`)
	numberRe  = regexp.MustCompile(`^(\d+(?:\.\d+)*)\.?\s+(.*)$`)
	ruleHead  = regexp.MustCompile(`^(?i)rule\s+(\d+)\b`)
)

// Load reads every *.md of dir.
func Load(dir string) (Docs, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return nil, err
	}
	docs := make(Docs)
	for _, p := range names {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		d := &Doc{Name: filepath.Base(p), Sections: map[string]bool{}, Rules: map[int]bool{}, Headings: map[string]bool{}}
		fence := false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				fence = !fence
				continue
			}
			m := headingRe.FindStringSubmatch(line)
			if fence || m == nil {
				continue
			}
			title := m[2]
			if n := numberRe.FindStringSubmatch(title); n != nil {
				d.Sections[n[1]] = true
				title = n[2]
			}
			if r := ruleHead.FindStringSubmatch(title); r != nil {
				n, _ := strconv.Atoi(r[1])
				d.Rules[n] = true
			}
			d.Headings[strings.ToLower(title)] = true
		}
		docs[d.Name] = d
	}
	return docs, nil
}

// Ref is one reference found in a text.
type Ref struct {
	Line    int    // 1-based
	Text    string // as written
	Doc     string // the document it names or belongs to; "" if none
	Section string // "3.2", or ""
	Rule    int    // design rule, or 0
	Heading string // quoted heading, or ""
	Outside bool   // names a path outside the repository

	off int // byte offset, for ordering
}

func (r Ref) String() string {
	switch {
	case r.Section != "":
		return fmt.Sprintf("%s §%s", r.Doc, r.Section)
	case r.Rule != 0:
		return fmt.Sprintf("%s rule %d", r.Doc, r.Rule)
	case r.Heading != "":
		return fmt.Sprintf("%s %q", r.Doc, r.Heading)
	}
	return r.Doc
}

// Separators inside a list of sections or rules: spaces, newlines with
// their comment leaders, commas, slashes, "and", "or".
const sep = `(?:[\s,/*#]|\band\b|\bor\b)*`

var (
	// a document name: docs/NAME.md, or a bare NAME.md (the mention group
	// tells them apart); shared/docs/ is caught separately
	docName = `(?i:(?P<dir>(?:[\w.-]+/)*docs/)?(?P<name>[a-z0-9][\w-]*)\.md)`
	secList = `§\s?\d+(?:\.\d+)*(?:` + sep + `§\s?\d+(?:\.\d+)*)*`
	// what may follow a document name and belongs to it
	tail = `(?:(?:[\s(]|//|#)*(?:(?P<secs>` + secList + `)` +
		`|(?i:sections?)\s+(?P<words>\d+(?:\.\d+)*(?:` + sep + `\d+(?:\.\d+)*)*)` +
		`|(?i:rules?)\s+(?P<rules>\d+(?:` + sep + `\d+)*))` +
		`|(?:,\s*|\s+)"(?P<head>[^"\n]+)")?`
	mentionRe = regexp.MustCompile(docName + tail)
	secRe     = regexp.MustCompile(`§\s?(\d+(?:\.\d+)*)`)
	numRe     = regexp.MustCompile(`\d+(?:\.\d+)*`)
	ruleRe    = regexp.MustCompile(`(?i)\brules?\s+(\d+(?:` + sep + `\d+)*)`)
	outsideRe = regexp.MustCompile(`shared/docs/`)
)

// Scan returns the references in text. Sections and rules that follow no
// document name belong to def (a section) or to design.md (a rule); def
// "" leaves their Doc empty, which Check reports.
func Scan(text, def string) []Ref {
	lines := lineIndex(text)
	var refs []Ref
	claimed := make([]bool, len(text)) // bytes already part of a mention
	gi := func(name string) int { return mentionRe.SubexpIndex(name) }
	for _, m := range mentionRe.FindAllStringSubmatchIndex(text, -1) {
		dir, name := sub(text, m, gi("dir")), strings.ToLower(sub(text, m, gi("name")))
		secs, words, rules, head := sub(text, m, gi("secs")), sub(text, m, gi("words")), sub(text, m, gi("rules")), sub(text, m, gi("head"))
		if dir == "" && secs == "" && words == "" && rules == "" && head == "" {
			continue // README.md and the like: not a document reference
		}
		if dir != "" && !strings.HasSuffix(strings.ToLower(dir), "docs/") {
			continue
		}
		if dir == "" && head != "" && secs == "" && words == "" && rules == "" {
			continue // a quoted title after README.md: not one of docs/
		}
		doc := name + ".md"
		line := lines.at(m[0])
		whole := text[m[0]:m[1]]
		for i := m[0]; i < m[1]; i++ {
			claimed[i] = true
		}
		base := Ref{off: m[0], Line: line, Text: strings.TrimSpace(whole), Doc: doc, Outside: dir != "" && !isRepoDocs(dir)}
		switch {
		case secs != "":
			for _, s := range secRe.FindAllStringSubmatch(secs, -1) {
				r := base
				r.Section = s[1]
				refs = append(refs, r)
			}
		case words != "":
			for _, s := range numRe.FindAllString(words, -1) {
				r := base
				r.Section = s
				refs = append(refs, r)
			}
		case rules != "":
			for _, s := range numRe.FindAllString(rules, -1) {
				r := base
				r.Rule, _ = strconv.Atoi(s)
				refs = append(refs, r)
			}
		case head != "":
			r := base
			r.Heading = head
			refs = append(refs, r)
		default:
			refs = append(refs, base)
		}
	}
	for _, m := range outsideRe.FindAllStringIndex(text, -1) {
		if !claimed[m[0]] {
			refs = append(refs, Ref{off: m[0], Line: lines.at(m[0]), Text: "shared/docs/", Outside: true})
		}
	}
	for _, m := range secRe.FindAllStringSubmatchIndex(text, -1) {
		if claimed[m[0]] {
			continue
		}
		refs = append(refs, Ref{off: m[0], Line: lines.at(m[0]), Text: text[m[0]:m[1]], Doc: def, Section: text[m[2]:m[3]]})
	}
	for _, m := range ruleRe.FindAllStringSubmatchIndex(text, -1) {
		if claimed[m[0]] {
			continue
		}
		for _, s := range numRe.FindAllString(text[m[2]:m[3]], -1) {
			n, _ := strconv.Atoi(s)
			refs = append(refs, Ref{off: m[0], Line: lines.at(m[0]), Text: text[m[0]:m[1]], Doc: "design.md", Rule: n})
		}
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].off < refs[j].off })
	return refs
}

// isRepoDocs reports whether dir (the part before NAME.md) is the
// repository's docs/ directory as seen from somewhere in the tree.
func isRepoDocs(dir string) bool {
	d := strings.ToLower(dir)
	return d == "docs/" || !strings.Contains(d, "shared/")
}

func sub(s string, m []int, g int) string {
	if g < 0 || m[2*g] < 0 {
		return ""
	}
	return s[m[2*g]:m[2*g+1]]
}

// Check returns why r does not resolve, or nil.
func (ds Docs) Check(r Ref) error {
	if r.Outside {
		return fmt.Errorf("%q points outside the repository", r.Text)
	}
	if r.Doc == "" {
		return fmt.Errorf("%q: a section with no document (name the document, e.g. docs/ib-cm.md %s)", r.Text, r.Text)
	}
	d, ok := ds[r.Doc]
	if !ok {
		return fmt.Errorf("%q: there is no docs/%s", r.Text, r.Doc)
	}
	switch {
	case r.Section != "" && !d.Sections[r.Section]:
		return fmt.Errorf("%q: docs/%s has no section %s", r.Text, r.Doc, r.Section)
	case r.Rule != 0 && !d.Rules[r.Rule]:
		return fmt.Errorf("%q: docs/%s has no rule %d", r.Text, r.Doc, r.Rule)
	case r.Heading != "" && !d.Headings[strings.ToLower(r.Heading)]:
		return fmt.Errorf("%q: docs/%s has no heading %q", r.Text, r.Doc, r.Heading)
	}
	return nil
}

// Defaults names the document that unqualified § references in a
// directory's files belong to, by the directory's path in the repository
// ("cmcore/wire" falls back to "cmcore"). Files in docs/ refer to
// themselves.
var Defaults = map[string]string{
	"abi":          "ucm-abi.md",
	"ucm":          "ucm-abi.md",
	"conformance":  "ucm-abi.md",
	"test/clients": "ucm-abi.md",
	"cmcore":       "ib-cm.md",
	"test/interop": "ib-cm.md",
	"cuse":         "cuse.md",
	"hw/umad":      "umad.md",
}

// DefaultFor returns the default document of a file at rel (a slash
// path relative to the repository root).
func DefaultFor(rel string) string {
	if strings.HasPrefix(rel, "docs/") && !strings.Contains(rel[len("docs/"):], "/") {
		return rel[len("docs/"):]
	}
	for dir := filepath.ToSlash(filepath.Dir(rel)); dir != "." && dir != "/"; dir = filepath.ToSlash(filepath.Dir(dir)) {
		if d, ok := Defaults[dir]; ok {
			return d
		}
	}
	return ""
}

// lines maps byte offsets to line numbers.
type lines []int

func lineIndex(s string) lines {
	l := lines{0}
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			l = append(l, i+1)
		}
	}
	return l
}

func (l lines) at(off int) int { return sort.SearchInts(l, off+1) }
