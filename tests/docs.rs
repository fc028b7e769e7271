//! The documentation against the code: every link resolves, the README stays an admin's
//! first page, the CLI reference is the binary's own help (generated: `BAREMEND_BLESS=1 cargo
//! test --test docs` rewrites it), and the metric and policy tables of the reference list
//! exactly what the code registers and defines, with its defaults.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use baremend_testkit as common;

use common::repo_root;

/// Every Markdown file of the documentation, the README first, as repository paths.
fn documents() -> Vec<PathBuf> {
    let root = repo_root();
    let mut out = vec![root.join("README.md")];
    files_under(&root.join("docs"), "md", &mut out);
    out.sort();
    out
}

/// Every file under `dir`, at any depth, whose extension is `extension`, added to `out`.
fn files_under(dir: &Path, extension: &str, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, extension, out);
        } else if path.extension().is_some_and(|e| e == extension) {
            out.push(path);
        }
    }
}

/// Why a reference to `target` (`#anchor`, if any) is broken, if it is: no such file, or no
/// such heading in it.
fn broken_reference(target: &Path, anchor: &str) -> Option<&'static str> {
    if !target.exists() {
        return Some("no such file");
    }
    let text = std::fs::read_to_string(target).unwrap_or_default();
    (!anchor.is_empty() && !anchors(&text).contains(anchor)).then_some("no such heading")
}

/// The anchors a Markdown renderer makes of a document's headings (GitHub's rule: lower
/// case, punctuation dropped, spaces to hyphens; repeats numbered).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        out.insert(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    out
}

/// The relative link targets of a Markdown text (`](target)`), outside code.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        for piece in line.split("](").skip(1) {
            if let Some(target) = piece.split(')').next()
                && !target.contains("://")
                && !target.starts_with("mailto:")
            {
                out.push(target.to_owned());
            }
        }
    }
    out
}

/// The repository paths a YAML comment names (`docs/…md`, `deploy/…`, `crds/…`, with an
/// optional `#heading`), as a reader would follow them from the repository root.
fn comment_references(text: &str) -> Vec<String> {
    let roots = ["docs/", "deploy/", "crds/"];
    text.lines()
        .filter_map(|line| line.split_once('#').map(|(_, comment)| comment))
        .flat_map(|comment| comment.split_whitespace())
        .map(|word| word.trim_matches(|c: char| "()[]`'\",;:.".contains(c)))
        .filter(|word| roots.iter().any(|r| word.starts_with(r)))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_file_a_comment_of_deploy_names_exists_with_its_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    let mut files = Vec::new();
    files_under(&repo_root().join("deploy"), "yaml", &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file
            .strip_prefix(repo_root())
            .unwrap()
            .display()
            .to_string();
        for reference in comment_references(&text) {
            checked += 1;
            let (path, anchor) = reference.split_once('#').unwrap_or((&reference, ""));
            if let Some(why) = broken_reference(&repo_root().join(path), anchor) {
                broken.push(format!("{name}: {reference}: {why}"));
            }
        }
    }
    assert!(checked > 20, "only {checked} references seen");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn every_link_of_the_documentation_resolves_to_a_file_and_a_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for document in documents() {
        let text = std::fs::read_to_string(&document).unwrap();
        for link in links(&text) {
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                document.clone()
            } else {
                document.parent().unwrap().join(path)
            };
            checked += 1;
            let name = document.strip_prefix(repo_root()).unwrap().display();
            if let Some(why) = broken_reference(&target, anchor) {
                broken.push(format!("{name}: {link}: {why}"));
            }
        }
    }
    assert!(checked > 100, "only {checked} links seen");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_readme_leads_an_admin_in_at_most_150_lines() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 150, "README.md has {lines} lines");
    // What it is, the two commands, the quick start and where to go next, in that order.
    let at = |needle: &str| {
        readme
            .find(needle)
            .unwrap_or_else(|| panic!("README.md lacks {needle:?}"))
    };
    let order = [
        at("# baremend"),
        at("cargo run --bin baremend -- lab"),
        at("bash scripts/test.sh"),
        at("kubectl apply -k deploy/overlays/openshift"),
        at("docs/guides/install.md"),
    ];
    assert!(order.is_sorted(), "{order:?}");
}

/// `baremend <command> --help`, with an environment of nothing but `PATH` (the help shows
/// an `[env: …]` variable's value when it is set).
fn help(command: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_baremend"))
        .args(command)
        .arg("--help")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert!(output.status.success(), "{command:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// The subcommands a help text lists (its `Commands:` block), without `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.split("Commands:\n")
        .nth(1)
        .map(|block| {
            block
                .lines()
                .take_while(|l| l.starts_with("  "))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|c| *c != "help")
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The CLI reference, generated from the binary's help: every command and subcommand.
fn cli_reference() -> String {
    let mut out = String::from(
        "# Reference: the command line\n\n\
         Every command of `baremend` with its options, as `baremend <command> --help` prints \
         them (`lab` is in the default build only, not in the image). Generated from the \
         binary by `tests/docs.rs` (`BAREMEND_BLESS=1 cargo test --test docs` rewrites this \
         file; the test fails when it is stale). Back to the [README](../../README.md).\n",
    );
    let mut queue = vec![Vec::<String>::new()];
    while let Some(command) = queue.pop() {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let text = help(&args);
        let title = if command.is_empty() {
            "baremend".to_owned()
        } else {
            format!("baremend {}", command.join(" "))
        };
        out.push_str(&format!("\n## `{title}`\n\n```text\n{}```\n", text));
        for sub in subcommands(&text).into_iter().rev() {
            let mut next = command.clone();
            next.push(sub);
            queue.push(next);
        }
    }
    out
}

#[test]
fn the_cli_reference_is_the_binarys_own_help() {
    let path = repo_root().join("docs/reference/cli.md");
    let generated = cli_reference();
    if std::env::var_os("BAREMEND_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        stored == generated,
        "docs/reference/cli.md is stale: run `BAREMEND_BLESS=1 cargo test --test docs`"
    );
    for command in [
        "run", "check", "status", "retry", "ack", "gather", "bmc off",
    ] {
        assert!(
            stored.contains(&format!("## `baremend {command}`")),
            "{command}"
        );
    }
}

/// The first cells of the rows of every table whose header's first cell is `header`.
fn first_cells<'a>(text: &'a str, header: &str) -> Vec<Vec<&'a str>> {
    let mut rows = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if !line.starts_with('|') {
            inside = false;
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        if cells[0] == header {
            inside = true;
        } else if inside && !cells[0].starts_with("---") {
            rows.push(cells);
        }
    }
    rows
}

#[test]
fn the_metrics_reference_lists_exactly_the_series_the_code_registers_with_their_types() {
    // The registry's families, each given a series (an empty labelled family is not
    // encoded), named as Prometheus stores their series.
    let registered = common::prometheus::exported_families();
    assert!(registered.len() > 20, "{registered:?}");
    let text = std::fs::read_to_string(repo_root().join("docs/reference/metrics.md")).unwrap();
    let documented: BTreeMap<String, String> = first_cells(&text, "series")
        .into_iter()
        .map(|cells| (cells[0].trim_matches('`').to_owned(), cells[1].to_owned()))
        .collect();
    assert_eq!(
        documented, registered,
        "docs/reference/metrics.md's series tables against the registry"
    );
}

/// The leaf fields of a schema's properties, as dotted paths, with their defaults.
fn leaves(schema: &Value, prefix: &str, out: &mut BTreeMap<String, Option<Value>>) {
    for (name, field) in schema["properties"].as_object().into_iter().flatten() {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        if field["properties"].is_object() {
            leaves(field, &path, out);
        } else {
            out.insert(path, field.get("default").cloned());
        }
    }
}

#[test]
fn the_policy_tables_name_every_field_of_the_crds_with_its_default() {
    let text = std::fs::read_to_string(repo_root().join("docs/reference/resources.md")).unwrap();
    let tables = [
        ("RemediationPolicy", "## `RemediationPolicy` fields"),
        ("DriftPolicy", "## `DriftPolicy` fields"),
    ];
    for (kind, heading) in tables {
        let (_, crd) = baremend::api::all_crds()
            .into_iter()
            .find(|(_, crd)| crd.spec.names.kind == kind)
            .unwrap();
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
        let mut fields = BTreeMap::new();
        leaves(spec, "", &mut fields);
        let section = text
            .split(heading)
            .nth(1)
            .unwrap_or_else(|| panic!("no {heading}"))
            .split("\n## ")
            .next()
            .unwrap();
        let mut rows = BTreeMap::new();
        for cells in first_cells(section, "field") {
            for name in cells[0].split(", ") {
                rows.insert(name.trim_matches('`').to_owned(), cells[1].to_owned());
            }
        }
        let named: BTreeSet<&String> = rows.keys().collect();
        let defined: BTreeSet<&String> = fields.keys().collect();
        assert_eq!(
            named, defined,
            "{kind}: the table's fields against the CRD's"
        );
        for (field, default) in fields {
            let Some(scalar) = default.filter(|d| !d.is_object() && !d.is_array()) else {
                continue;
            };
            let shown = match &scalar {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            assert!(
                rows[&field].contains(&shown),
                "{kind}.{field}: the table says {:?}, the CRD's default is {shown}",
                rows[&field]
            );
        }
    }
}

/// The README's flow is drawn from the real phases: each phase of `RemediationPhase`, in its
/// order, begins a line of the block (the ends on the last lines), and nothing else does.
#[test]
fn the_readmes_flow_names_every_phase_in_order_and_nothing_else() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let from = readme.find("How a remediation goes:").expect("the flow");
    let block = common::fenced_blocks(&readme[from..], "text")
        .into_iter()
        .next()
        .expect("the flow's block");
    // A line that starts with a word at the margin names a phase.
    let named: Vec<&str> = block
        .lines()
        .skip(1)
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let main: Vec<String> = baremend::api::RemediationPhase::ALL
        .iter()
        .map(|p| {
            serde_json::to_value(p)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .filter(|p| !["Failed", "Cancelled", "DryRun"].contains(&p.as_str()))
        .collect();
    assert_eq!(named, main, "{block}");
    for end in ["Failed", "Cancelled", "DryRun"] {
        assert!(block.contains(end), "{end} missing: {block}");
    }
}
