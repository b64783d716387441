//! The rules of FORMAT.md section 14.4 for `repos` (a bundle of several repositories), case by
//! case, and the view of one repository the installers work on.

use super::*;

fn file(path: &str, size: u64, sha: char) -> FileEntry {
    FileEntry {
        path: path.into(),
        size,
        sha256: sha.to_string().repeat(64),
        executable: false,
        from: None,
    }
}

fn source(id: &str, etags: Vec<String>) -> HfSource {
    HfSource {
        repo_id: id.into(),
        repo_type: "model".into(),
        revision: "main".into(),
        commit: "c".repeat(40),
        etags,
    }
}

/// A version 2 manifest of an adapter and its base, with its stream size and totals made
/// consistent by [`fix`].
fn two() -> Manifest {
    let mut m = Manifest {
        format: FORMAT_ID.into(),
        format_version: 2,
        name: "org/adapter+org/base".into(),
        version: 1,
        created: rfc3339(0),
        tool: "airlock test".into(),
        compression: Compression {
            algorithm: "zstd".into(),
            level: Some(3),
        },
        stream: Stream { size: 0 },
        chunk_size: 4096,
        volumes: vec![Volume {
            name: "data.000".into(),
            size: 100,
            sha256: None,
            chunks: vec!["3".repeat(64)],
        }],
        directories: vec![
            "models--org--adapter".into(),
            "models--org--base".into(),
            "models--org--base/sub".into(),
        ],
        files: vec![
            file("models--org--adapter/adapter_config.json", 10, '1'),
            file("models--org--base/config.json", 20, '2'),
            file("models--org--base/sub/model.safetensors", 30, '4'),
        ],
        totals: Totals {
            files: 0,
            directories: 0,
            file_bytes: 0,
            volume_bytes: 100,
        },
        warnings: vec![Warning {
            path: "models--org--base/config.json".into(),
            code: "x".into(),
            problem: "y".into(),
        }],
        source: None,
        repos: vec![
            Repo {
                path: "models--org--adapter".into(),
                source: source("org/adapter", vec!["a".repeat(40)]),
            },
            Repo {
                path: "models--org--base".into(),
                source: source("org/base", vec!["b".repeat(40), "4".repeat(64)]),
            },
        ],
        parity: None,
        base: None,
        dir: None,
        trust_update: None,
        values: None,
        oms: None,
    };
    fix(&mut m);
    m
}

/// Totals and stream size from the lists.
fn fix(m: &mut Manifest) {
    m.totals.files = m.files.len() as u64;
    m.totals.directories = m.directories.len() as u64;
    m.totals.file_bytes = m.files.iter().map(|f| f.size).sum();
    m.stream.size = 1024
        + m.directories
            .iter()
            .map(|d| entry_stream_size(d, true, 0).unwrap())
            .sum::<u64>()
        + m.files
            .iter()
            .enumerate()
            .map(|(i, f)| match (&f.from, f.patch()) {
                (None, _) => entry_stream_size(&f.path, false, f.size).unwrap(),
                (Some(_), None) => 0,
                (Some(_), Some((size, _))) => {
                    entry_stream_size(&patch_path(i), false, size).unwrap()
                }
            })
            .sum::<u64>()
        + if m.files.iter().any(|f| f.patch().is_some()) {
            entry_stream_size(DELTA_DIR, true, 0).unwrap()
        } else {
            0
        };
}

/// Makes `m` a delta of its version 1 (every file carried).
fn delta(m: &mut Manifest) {
    m.version = 2;
    m.base = Some(Base {
        name: m.name.clone(),
        version: 1,
        manifest_sha256: "0".repeat(64),
    });
}

fn copy(path: &str) -> From {
    From {
        path: path.into(),
        op: OP_COPY.into(),
        map: None,
        patch_size: None,
        patch_sha256: None,
    }
}

fn refused(m: &Manifest) -> String {
    Manifest::parse(&m.to_bytes())
        .expect_err("refused")
        .to_string()
}

#[test]
fn a_bundle_of_two_repositories_validates_and_gives_each_its_view() {
    let m = two();
    assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m);
    assert_eq!(
        m.repo_of("models--org--base/sub/model.safetensors"),
        Some(1)
    );
    assert_eq!(m.repo_files(0).len(), 1);
    assert_eq!(m.repo_files(1).len(), 2);
    let v = m.repo_view(1).unwrap();
    let paths: Vec<&str> = v.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["config.json", "sub/model.safetensors"]);
    assert_eq!(v.directories, ["sub"]);
    assert_eq!(v.source.as_ref().unwrap().repo_id, "org/base");
    assert_eq!(v.warnings.len(), 1);
    assert_eq!(v.warnings[0].path, "config.json");
    assert!(m.repo_view(0).unwrap().warnings.is_empty());
    assert!(m.repo_view(2).is_none());
}

/// A delta of several repositories (FORMAT.md section 14.4): each file is carried or taken
/// from the same repository of the base, at any path of it; the base must be of several
/// repositories too; a repository is matched to the base's by its directory.
#[test]
fn a_delta_of_several_repositories_takes_each_file_from_its_own_repository() {
    let mut m = two();
    delta(&mut m);
    m.files[1].from = Some(Box::new(copy("models--org--base/old-config.json")));
    m.files[2].from = Some(Box::new(From {
        path: "models--org--base/sub/model.safetensors".into(),
        op: "xor".into(),
        map: Some("safetensors".into()),
        patch_size: Some(7),
        patch_sha256: Some("6".repeat(64)),
    }));
    fix(&mut m);
    let parsed = Manifest::parse(&m.to_bytes()).expect("a delta of two repositories is valid");
    assert_eq!(parsed, m);
    // The base: the same two repositories, or a third one dropped, or one of them new.
    let base = two();
    assert!(m.check_repos_base(&base).is_ok());
    assert_eq!(m.base_repo(0, &base), Some(0));
    assert_eq!(m.base_repo(1, &base), Some(1));
    let mut other = two();
    other.repos[0].path = "models--org--other".into();
    assert_eq!(m.base_repo(0, &other), None);
    assert_eq!(m.base_repo(1, &other), Some(1));
    // A base of one model is not the base of a delta of several, nor the reverse.
    let mut single = two();
    single.repos.clear();
    let err = m.check_repos_base(&single).unwrap_err();
    assert_eq!(err, ShapeMismatch::SeveralAgainstOne);
    assert!(
        err.to_string().contains("against a base of one model"),
        "{err}"
    );
    let err = single.check_repos_base(&base).unwrap_err();
    assert_eq!(err, ShapeMismatch::OneAgainstSeveral);
    assert!(
        err.to_string()
            .contains("against a base of several repositories"),
        "{err}"
    );
}

#[test]
fn repos_are_refused_when_they_break_a_rule() {
    type Edit = Box<dyn Fn(&mut Manifest)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "need format version 2",
            Box::new(|m| {
                m.format_version = 1;
                m.volumes[0].sha256 = Some("5".repeat(64));
            }),
        ),
        (
            "2 to 256 allowed",
            Box::new(|m| {
                m.repos.pop();
                m.directories.retain(|d| !d.contains("base"));
                m.files.retain(|f| !f.path.contains("base"));
            }),
        ),
        (
            "both source and repos",
            Box::new(|m| m.source = Some(source("org/x", vec![]))),
        ),
        // A delta of several repositories takes a file only from its own repository.
        (
            "which is not in the same repository \"models--org--base\"",
            Box::new(|m| {
                delta(m);
                m.files[1].from = Some(Box::new(copy("models--org--adapter/adapter_config.json")));
            }),
        ),
        (
            "which is not in the same repository \"models--org--base\"",
            Box::new(|m| {
                delta(m);
                m.files[1].from = Some(Box::new(copy("models--org--base")));
            }),
        ),
        // Two entries for one repository: the same directory twice.
        (
            "out of order or twice",
            Box::new(|m| m.repos[1] = m.repos[0].clone()),
        ),
        // A directory that is not the repository's folder name (a path elsewhere, `..`).
        (
            "not under its folder name",
            Box::new(|m| m.repos[1].path = "models--org--other".into()),
        ),
        (
            "has a repos[1].source.repo_id",
            Box::new(|m| {
                m.repos[1].source.repo_id = "org/..".into();
                m.repos[1].path = "models--org--..".into();
            }),
        ),
        // A repository the bundle claims but carries nothing of.
        (
            "but not its directory",
            Box::new(|m| {
                m.repos.push(Repo {
                    path: "models--org--ghost".into(),
                    source: source("org/ghost", vec![]),
                });
            }),
        ),
        (
            "with no file under",
            Box::new(|m| {
                m.directories.push("models--org--ghost".into());
                m.repos.push(Repo {
                    path: "models--org--ghost".into(),
                    source: source("org/ghost", vec![]),
                });
            }),
        ),
        (
            "which is in none of its repositories",
            Box::new(|m| m.files.push(file("stray.txt", 1, '5'))),
        ),
        (
            "different number of etags in repos[1].source",
            Box::new(|m| {
                m.repos[1].source.etags.pop();
            }),
        ),
        (
            "which is not its sha256",
            Box::new(|m| m.repos[1].source.etags[1] = "9".repeat(64)),
        ),
        (
            "repos.path field with control characters",
            Box::new(|m| m.repos[0].path = "models--org--a\u{1b}".into()),
        ),
    ];
    for (want, edit) in cases {
        let mut m = two();
        edit(&mut m);
        fix(&mut m);
        let err = refused(&m);
        assert!(err.contains(want), "{want}: {err}");
    }
    // null is refused (an optional field has a value or is absent); an empty list is no
    // repository list, as for `warnings`: the bundle is then a tree of two top-level folders
    // without source, installed as one model.
    let text = String::from_utf8(two().to_bytes()).unwrap();
    let start = text.find("\"repos\"").unwrap();
    let end = text[start..].find("\n  ]").unwrap() + start + 4;
    let with = |replacement: &str| format!("{}{replacement}{}", &text[..start], &text[end..]);
    assert!(Manifest::parse(with("\"repos\": null").as_bytes()).is_err());
    let empty = Manifest::parse(with("\"repos\": []").as_bytes()).unwrap();
    assert!(empty.repos.is_empty());
}

/// What an older reader does with a bundle of several repositories: its strict parse refuses
/// the unknown field `repos`, naming it, rather than install the tree as one model. Modelled
/// here by the same strict parse of a manifest type without the field.
#[test]
fn an_older_reader_refuses_repos_as_an_unknown_field() {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Older {
        format: String,
        format_version: u32,
        name: String,
        version: u64,
        created: String,
        tool: String,
        compression: serde_json::Value,
        stream: serde_json::Value,
        chunk_size: u64,
        volumes: serde_json::Value,
        directories: serde_json::Value,
        files: serde_json::Value,
        totals: serde_json::Value,
        #[serde(default)]
        warnings: serde_json::Value,
    }
    let bytes = two().to_bytes();
    let err = serde_json::from_slice::<Older>(&bytes)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("unknown field `repos`"), "{err}");
    // The same manifest without `repos` is one an older reader takes.
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v.as_object_mut().unwrap().remove("repos");
    assert!(serde_json::from_value::<Older>(v).is_ok());
}

/// A model directory beside one repository (FORMAT.md section 14.4, `dir`): `NAME/` among the
/// repositories' folders in bundle order.
fn with_dir() -> Manifest {
    let mut m = two();
    m.repos.remove(0);
    m.directories = vec![
        "models--org--base".into(),
        "models--org--base/sub".into(),
        "mydir".into(),
    ];
    m.files = vec![
        file("models--org--base/config.json", 20, '2'),
        file("models--org--base/sub/model.safetensors", 30, '4'),
        file("mydir/adapter_config.json", 10, '1'),
    ];
    m.dir = Some(DirPart {
        path: "mydir".into(),
    });
    fix(&mut m);
    m
}

#[test]
fn a_directory_beside_repositories_validates_and_a_view_leaves_it_out() {
    let m = with_dir();
    assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m);
    assert!(m.in_dir("mydir/adapter_config.json"));
    assert!(!m.in_dir("models--org--base/config.json"));
    assert_eq!(m.repo_of("mydir/adapter_config.json"), None);
    assert_eq!(m.repo_files(0).len(), 2);
    let v = m.select_repos(&[0]).unwrap();
    assert!(v.dir.is_none());
    assert!(v.files.iter().all(|f| !f.path.starts_with("mydir")));
    // Without `dir`, one repository is not a bundle of several.
    let mut one = with_dir();
    one.dir = None;
    assert!(refused(&one).contains("lists 1 repos"), "{}", refused(&one));
}

/// One way to break a rule of a directory beside repositories, and the reason it must give.
type Breakage = (&'static str, Box<dyn Fn(&mut Manifest)>);

#[test]
fn a_directory_beside_repositories_is_refused_when_it_breaks_a_rule() {
    let cases: Vec<Breakage> = vec![
        ("has dir and a base", Box::new(delta)),
        (
            "not one path component",
            Box::new(|m| m.dir.as_mut().unwrap().path = "models--org--x".into()),
        ),
        (
            "not one path component",
            Box::new(|m| m.dir.as_mut().unwrap().path = "mydir/sub".into()),
        ),
        (
            "but not its directory",
            Box::new(|m| m.dir.as_mut().unwrap().path = "other".into()),
        ),
        (
            "with no file under it",
            Box::new(|m| {
                m.files.pop();
            }),
        ),
        (
            "nor its dir",
            Box::new(|m| m.files.push(file("zz.txt", 1, '5'))),
        ),
    ];
    for (want, break_it) in cases {
        let mut m = with_dir();
        break_it(&mut m);
        fix(&mut m);
        let why = refused(&m);
        assert!(why.contains(want), "{want}: {why}");
    }
}

/// A reader of before `dir` (its manifest's fields, each one known, as of 73ae09e) refuses a
/// manifest with `dir` as an unknown field, and takes the same manifest without it.
#[test]
fn an_older_reader_refuses_dir_as_an_unknown_field() {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Older {
        format: String,
        format_version: u32,
        name: String,
        version: u64,
        created: String,
        tool: String,
        compression: serde_json::Value,
        stream: serde_json::Value,
        chunk_size: u64,
        volumes: serde_json::Value,
        directories: serde_json::Value,
        files: serde_json::Value,
        totals: serde_json::Value,
        #[serde(default)]
        warnings: serde_json::Value,
        #[serde(default)]
        source: serde_json::Value,
        #[serde(default)]
        repos: serde_json::Value,
        #[serde(default)]
        base: serde_json::Value,
        #[serde(default)]
        parity: serde_json::Value,
        #[serde(default)]
        trust_update: serde_json::Value,
        #[serde(default)]
        values: serde_json::Value,
        #[serde(default)]
        oms: serde_json::Value,
    }
    let bytes = with_dir().to_bytes();
    let err = serde_json::from_slice::<Older>(&bytes)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("unknown field `dir`"), "{err}");
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v.as_object_mut().unwrap().remove("dir");
    assert!(serde_json::from_value::<Older>(v).is_ok());
}
