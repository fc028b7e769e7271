//! `baremend completion <shell>` prints a completion script; bash, which every machine here
//! has, runs it and completes subcommands and flags.

use std::process::Command;

fn script(shell: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_baremend"))
        .args(["completion", shell])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What bash completes for the words `line` (the last one being typed).
fn complete_in_bash(line: &[&str]) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("baremend-completion-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("baremend.bash");
    std::fs::write(&file, script("bash")).unwrap();
    let words = line.join(" ");
    let program = format!(
        "source {file}; COMP_WORDS=({words}); COMP_CWORD={last}; COMP_LINE='{words}'; \
         COMP_POINT=${{#COMP_LINE}}; _baremend baremend '{current}' '{previous}'; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        file = file.display(),
        last = line.len() - 1,
        current = line[line.len() - 1],
        previous = line[line.len() - 2],
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_subcommands_and_their_flags() {
    assert_eq!(complete_in_bash(&["baremend", "ch"]), vec!["check"]);
    let flags = complete_in_bash(&["baremend", "run", "--kube"]);
    assert_eq!(flags, vec!["--kubeconfig"]);
}

#[test]
fn every_shell_gets_a_script_naming_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let text = script(shell);
        for subcommand in ["check", "run", "status", "gather"] {
            assert!(text.contains(subcommand), "{shell}: no {subcommand}");
        }
    }
}

#[test]
fn an_unknown_shell_is_refused_with_the_ones_there_are() {
    let out = Command::new(env!("CARGO_BIN_EXE_baremend"))
        .args(["completion", "tcsh"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bash") && stderr.contains("zsh"),
        "{stderr}"
    );
}
