package docref

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ucmd/ucmd/conformance"
)

// root is the repository root: the directory above with go.mod.
func root(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

func loadDocs(t *testing.T) Docs {
	t.Helper()
	docs, err := Load(filepath.Join(root(t), "docs"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("docs/ has no documents")
	}
	return docs
}

// scanned says which files may hold references: sources, scripts,
// documents and test data with comments.
func scanned(rel string) bool {
	switch filepath.Ext(rel) {
	case ".go", ".md", ".c", ".h", ".sh", ".hex", ".mk", ".rules", ".service":
		return true
	}
	b := filepath.Base(rel)
	return b == "Makefile" || b == "init" || b == "run"
}

// TestTreeReferences resolves every reference in the repository's files.
func TestTreeReferences(t *testing.T) {
	docs := loadDocs(t)
	top := root(t)
	n := 0
	err := filepath.WalkDir(top, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, top+string(filepath.Separator)))
		if e.IsDir() {
			switch e.Name() {
			case ".git", ".cache", "bin", "node_modules":
				return filepath.SkipDir
			}
			if rel == "internal/docref" {
				return filepath.SkipDir // its examples are not references
			}
			return nil
		}
		if !e.Type().IsRegular() || !scanned(rel) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, r := range Scan(string(b), DefaultFor(rel)) {
			n++
			if err := docs.Check(r); err != nil {
				t.Errorf("%s:%d: %v", rel, r.Line, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Errorf("only %d references found in the tree: is the scanner broken?", n)
	}
}

// TestConformanceSpecs resolves the references in the Spec strings that
// `ucmd conformance` prints next to a failed case. Every Spec cites at
// least one section, and names the document of each (a reader of the
// output has no package to take a default from).
func TestConformanceSpecs(t *testing.T) {
	docs := loadDocs(t)
	for _, c := range conformance.Cases() {
		refs := Scan(c.Spec, "")
		if len(refs) == 0 {
			t.Errorf("%s: Spec %q cites no document section", c.Name, c.Spec)
		}
		for _, r := range refs {
			if err := docs.Check(r); err != nil {
				t.Errorf("%s: %v", c.Name, err)
			}
		}
	}
}

// TestScan pins what the scanner takes for a reference, and that Check
// refuses what does not resolve.
func TestScan(t *testing.T) {
	docs := Docs{
		"ib-cm.md":   {Name: "ib-cm.md", Sections: map[string]bool{"3": true, "3.2": true, "3.4": true, "7": true}, Rules: map[int]bool{}, Headings: map[string]bool{}},
		"ucm-abi.md": {Name: "ucm-abi.md", Sections: map[string]bool{"2.3": true, "3.2": true}, Rules: map[int]bool{}, Headings: map[string]bool{}},
		"design.md":  {Name: "design.md", Sections: map[string]bool{}, Rules: map[int]bool{1: true, 3: true}, Headings: map[string]bool{}},
		"umad.md":    {Name: "umad.md", Sections: map[string]bool{}, Rules: map[int]bool{}, Headings: map[string]bool{"same-tid sends": true}},
	}
	for _, tc := range []struct {
		text, def string
		want      []string // Ref.String() of each
		bad       []string // those Check refuses
	}{
		{"// per ib-cm.md §3.2, §3.4 and §7; see §2.3", "ucm-abi.md",
			[]string{"ib-cm.md §3.2", "ib-cm.md §3.4", "ib-cm.md §7", "ucm-abi.md §2.3"}, nil},
		{"// docs/ucm-abi.md §2.3 and\n// §3.2", "", []string{"ucm-abi.md §2.3", "ucm-abi.md §3.2"}, nil},
		{"Spec: \"§3.2/§3.4: x\"", "ib-cm.md", []string{"ib-cm.md §3.2", "ib-cm.md §3.4"}, nil},
		{"(design.md rule 3); rules 1 and 3; Design.md rule 2", "", []string{"design.md rule 3", "design.md rule 1", "design.md rule 3", "design.md rule 2"}, []string{"design.md rule 2"}},
		{`docs/umad.md, "Same-TID sends" and docs/umad.md, "Nothing"`, "", []string{`umad.md "Same-TID sends"`, `umad.md "Nothing"`}, []string{`umad.md "Nothing"`}},
		{"see docs/missing.md and README.md, §9.9", "ib-cm.md", []string{"missing.md", "ib-cm.md §9.9"}, []string{"missing.md", "ib-cm.md §9.9"}},
		{"a bare §3.2", "", []string{" §3.2"}, []string{" §3.2"}},
		{"shared/docs/vm2.md section 5.2; ../shared/docs/x", "", []string{"vm2.md §5.2", ""}, []string{"vm2.md §5.2", ""}},
	} {
		refs := Scan(tc.text, tc.def)
		var got, bad []string
		for _, r := range refs {
			got = append(got, r.String())
			if docs.Check(r) != nil {
				bad = append(bad, r.String())
			}
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") || strings.Join(bad, "|") != strings.Join(tc.bad, "|") {
			t.Errorf("Scan(%q):\n got %q, refused %q\nwant %q, refused %q", tc.text, got, bad, tc.want, tc.bad)
		}
	}
}
