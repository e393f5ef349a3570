"""Recipes: the kitti-c tables are the paper's, validation names the recipe and entry, fingerprints."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from importlib import resources

import pytest

from bench_build.manifests.recipe import Recipe, RecipeError, load_recipe, parse_recipe

# Li et al., Appendix C (seed 001, lines 733-780), severities 1..5 (severity 0 is the clean scan).
PAPER_GAUSSIAN_RAD_SIGMA = (0.04, 0.06, 0.08, 0.10, 0.12)
PAPER_BACKGROUND_DIVISOR = (45, 40, 35, 30, 20)  # N/45 … N/20
PAPER_BEAM_DEL_DIVISOR = (100, 30, 10, 5, 3)  # N/100 … N/3
# the paper prints the last range as "(0.9, 0.1)", a typo for (0.9, 1.0) (it says "< 1 m" in §IV)
PAPER_TRANSLATION_RANGE = ((0.0, 0.2), (0.3, 0.4), (0.5, 0.6), (0.7, 0.8), (0.9, 1.0))

ORIGIN = "my.toml"

BENCH = """\
[benchmark]
name = "tiny"
version = "0.1.0"
seed = 7
source = "kitti"
severities = 5
"""

GOOD = BENCH + """
[corruptions.gaussian_rad]
stage = "gaussian_rad"
sigma = [0.04, 0.06, 0.08, 0.10, 0.12]

[corruptions.beam_del]
stage = "beam_del"
count_divisor = [100, 30, 10, 5, 3]

[corruptions.translation]
stage = "translation"
min_distance = [0.0, 0.3, 0.5, 0.7, 0.9]
max_distance = [0.2, 0.4, 0.6, 0.8, 1.0]
"""

FRAMES = ["000000", "000001", "000002"]


@pytest.fixture(scope="module")
def kitti_c() -> Recipe:
    return load_recipe("kitti-c")


# -- the built-in kitti-c tables are the paper's --------------------------------------------------


def test_kitti_c_header(kitti_c):
    assert kitti_c.name == "kitti-c"
    assert kitti_c.severities == 5
    assert kitti_c.source == "kitti"
    assert isinstance(kitti_c.seed, int)


def test_kitti_c_gaussian_rad_is_papers(kitti_c):
    c = kitti_c.corruption("gaussian_rad")
    assert c.stage == "gaussian_rad"
    assert tuple(p.sigma for p in c.params) == PAPER_GAUSSIAN_RAD_SIGMA


def test_kitti_c_background_is_papers(kitti_c):
    c = kitti_c.corruption("background")
    assert c.stage == "background"
    assert tuple(p.count_divisor for p in c.params) == PAPER_BACKGROUND_DIVISOR


def test_kitti_c_beam_del_is_papers(kitti_c):
    c = kitti_c.corruption("beam_del")
    assert c.stage == "beam_del"
    assert tuple(p.count_divisor for p in c.params) == PAPER_BEAM_DEL_DIVISOR


def test_kitti_c_translation_is_papers():
    c = load_recipe("kitti-c:text").corruption("translation")
    assert c.stage == "translation"
    assert tuple((p.min_distance, p.max_distance) for p in c.params) == PAPER_TRANSLATION_RANGE
    assert "0.9, 0.1" in c.notes  # the reading of the paper's typo is documented


def test_kitti_c_params_for_severity(kitti_c):
    c = kitti_c.corruption("gaussian_rad")
    assert [c.params_for(s).sigma for s in range(1, 6)] == list(PAPER_GAUSSIAN_RAD_SIGMA)
    with pytest.raises(KeyError, match="no_such"):
        kitti_c.corruption("no_such")


def test_kitti_c_corruption_names_are_unique_and_not_clean(kitti_c):
    names = [c.name for c in kitti_c.corruptions]
    assert len(names) == len(set(names))
    assert "clean" not in names
    assert all(len(c.params) == kitti_c.severities for c in kitti_c.corruptions)


# -- validation errors name the recipe and the entry ----------------------------------------------


def _error(text: str) -> str:
    with pytest.raises(RecipeError) as e:
        parse_recipe(text, origin=ORIGIN)
    msg = str(e.value)
    assert ORIGIN in msg
    return msg


def test_good_recipe_parses():
    r = parse_recipe(GOOD, origin=ORIGIN)
    assert r.origin == ORIGIN
    assert [c.name for c in r.corruptions] == ["gaussian_rad", "beam_del", "translation"]
    assert r.frames_per_shard >= 1


def test_unknown_stage():
    msg = _error(BENCH + '[corruptions.weird]\nstage = "no_such_stage"\nsigma = 0.1\n')
    assert "weird" in msg and "no_such_stage" in msg


def test_missing_stage_key():
    msg = _error(BENCH + "[corruptions.weird]\nsigma = 0.1\n")
    assert "weird" in msg and "stage" in msg


def test_wrong_number_of_severity_values():
    msg = _error(BENCH + '[corruptions.noisy]\nstage = "gaussian_rad"\nsigma = [0.1, 0.2, 0.3]\n')
    assert "noisy" in msg and "sigma" in msg and "3" in msg and "5" in msg


def test_unknown_parameter():
    msg = _error(BENCH + '[corruptions.noisy]\nstage = "gaussian_rad"\nsigma = 0.1\nsigmaa = 0.2\n')
    assert "noisy" in msg and "sigmaa" in msg


def test_origin_says_where_ranges_are_measured_from_and_only_lidar_enters_the_fingerprint():
    """``origin = "lidar"`` is kept on the corruption and in its canonical JSON; the default ("points") is left out,
    so a recipe without the key keeps its fingerprint; any other value is refused, naming the corruption."""
    def with_origin(value: str):
        return parse_recipe(GOOD.replace('stage = "gaussian_rad"\n', f'stage = "gaussian_rad"\norigin = "{value}"\n'),
                            origin=ORIGIN)

    plain, lidar, said = parse_recipe(GOOD, origin=ORIGIN), with_origin("lidar"), with_origin("points")
    assert [c.origin for c in lidar.corruptions][:2] == ["lidar", "points"]
    assert said.canonical() == plain.canonical() and "origin" not in str(plain.canonical())
    assert lidar.canonical()["corruptions"][0]["origin"] == "lidar" and lidar.fingerprint([]) != plain.fingerprint([])
    msg = _error(BENCH + '[corruptions.noisy]\nstage = "gaussian_rad"\nsigma = 0.1\norigin = "vehicle"\n')
    assert "noisy" in msg and "'origin' must be one of 'points', 'lidar'" in msg and "'vehicle'" in msg


def test_missing_parameter():
    msg = _error(BENCH + '[corruptions.moved]\nstage = "translation"\nmin_distance = 0.1\n')
    assert "moved" in msg and "max_distance" in msg


def test_wrong_parameter_type():
    msg = _error(BENCH + '[corruptions.noisy]\nstage = "gaussian_rad"\nsigma = "big"\n')
    assert "noisy" in msg and "sigma" in msg


def test_integer_values_coerce_to_float():
    r = parse_recipe(BENCH + '[corruptions.moved]\nstage = "translation"\nmin_distance = 0.0\nmax_distance = 1\n',
                     origin=ORIGIN)
    assert all(p.max_distance == 1.0 and isinstance(p.max_distance, float) for p in r.corruption("moved").params)


@pytest.mark.parametrize("key", ["name", "version", "seed", "source", "severities"])
def test_missing_benchmark_key(key):
    bench = "\n".join(line for line in BENCH.splitlines() if not line.startswith(f"{key} ="))
    msg = _error(bench + '\n[corruptions.noisy]\nstage = "gaussian_rad"\nsigma = 0.1\n')
    assert repr(key) in msg and "[benchmark]" in msg


def test_missing_benchmark_table():
    msg = _error('[corruptions.noisy]\nstage = "gaussian_rad"\nsigma = 0.1\n')
    assert "[benchmark]" in msg


def test_unknown_benchmark_key():
    bench = BENCH.replace("seed = 7", "seed = 7\nseeed = 8")
    msg = _error(bench + '[corruptions.n]\nstage = "gaussian_rad"\nsigma = 0\n')
    assert "seeed" in msg


def test_no_corruptions():
    msg = _error(BENCH)
    assert "corruptions" in msg


def test_clean_is_reserved():
    msg = _error(BENCH + '[corruptions.clean]\nstage = "gaussian_rad"\nsigma = 0.1\n')
    assert "'clean'" in msg


def test_bad_toml():
    msg = _error(BENCH + "[corruptions.noisy\nstage = \n")
    assert "TOML" in msg


@pytest.mark.parametrize("bad", ["0", "-1", "2.5", "true"])
def test_bad_severities(bad):
    text = BENCH.replace("severities = 5", f"severities = {bad}")
    msg = _error(text + '[corruptions.noisy]\nstage = "gaussian_rad"\nsigma = 0.1\n')
    assert "severities" in msg


def test_three_severity_recipe_broadcasts_scalars():
    text = BENCH.replace("severities = 5", 'severities = 3\nseverity_names = ["light", "moderate", "heavy"]') + """
[corruptions.noisy]
stage = "gaussian_rad"
sigma = 0.05

[corruptions.dropped]
stage = "beam_del"
count_divisor = [10, 5, "inf"]

[corruptions.moved]
stage = "translation"
min_distance = 0
max_distance = [0.1, 0.2, 0.3]
"""
    r = parse_recipe(text, origin="robo.toml")
    assert r.severities == 3
    assert r.severity_names == ("light", "moderate", "heavy")
    assert [p.sigma for p in r.corruption("noisy").params] == [0.05, 0.05, 0.05]
    assert [p.count_divisor for p in r.corruption("dropped").params] == [10.0, 5.0, math.inf]
    moved = r.corruption("moved").params
    assert [(p.min_distance, p.max_distance) for p in moved] == [(0.0, 0.1), (0.0, 0.2), (0.0, 0.3)]
    assert r.examples_defined(10) == 10 * 3 * 4
    assert r.examples_stored(10) == 10 * (1 + 3 * 3)


def test_severity_names_must_match_severities():
    text = BENCH.replace("severities = 5", 'severities = 3\nseverity_names = ["light", "heavy"]')
    msg = _error(text + '[corruptions.noisy]\nstage = "gaussian_rad"\nsigma = 0.1\n')
    assert "severity_names" in msg


# -- loading by name or path ----------------------------------------------------------------------


def test_load_recipe_from_path_matches_builtin(tmp_path, kitti_c):
    text = (resources.files("manifests") / "recipes" / "kitti-c.toml").read_text()
    path = tmp_path / "copy.toml"
    path.write_text(text)
    for arg in (path, str(path)):
        r = load_recipe(arg)
        assert r.origin == str(path)
        assert r.canonical() == kitti_c.canonical()
        assert r.fingerprint(FRAMES) == kitti_c.fingerprint(FRAMES)


def test_load_recipe_missing_file(tmp_path):
    with pytest.raises(RecipeError, match="does not exist"):
        load_recipe(tmp_path / "nope.toml")


def test_load_recipe_unknown_name():
    with pytest.raises(RecipeError, match="no-such-benchmark"):
        load_recipe("no-such-benchmark")


def test_load_recipe_error_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text(BENCH + '[corruptions.noisy]\nstage = "gaussian_rad"\nsigma = [0.1]\n')
    with pytest.raises(RecipeError, match=r"broken\.toml"):
        load_recipe(path)


# -- fingerprint and example counts ---------------------------------------------------------------


def _fp(text: str, frames=FRAMES) -> str:
    return parse_recipe(text, origin=ORIGIN).fingerprint(frames)


def test_fingerprint_is_stable():
    a = _fp(GOOD)
    assert a == _fp(GOOD)
    assert len(a) == 64 and int(a, 16) >= 0
    # where it was loaded from, comments and key order do not matter
    assert parse_recipe(GOOD, origin="elsewhere.toml").fingerprint(FRAMES) == a
    reordered = GOOD.replace('stage = "gaussian_rad"\nsigma = [0.04, 0.06, 0.08, 0.10, 0.12]',
                             'sigma = [0.04, 0.06, 0.08, 0.10, 0.12]  # m\nstage = "gaussian_rad"')
    assert reordered != GOOD and _fp(reordered) == a


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("0.08, 0.10", "0.08, 0.11"),  # one sigma of one severity
        ("[100, 30, 10, 5, 3]", "[100, 30, 10, 5, 4]"),  # one count divisor
        ("[0.2, 0.4, 0.6, 0.8, 1.0]", "[0.2, 0.4, 0.6, 0.8, 0.95]"),  # one translation bound
        ("seed = 7", "seed = 8"),
        ('version = "0.1.0"', 'version = "0.1.1"'),
        ("[corruptions.beam_del]", "[corruptions.beam_delete]"),  # corruption name
    ],
)
def test_fingerprint_changes_with_recipe(old, new):
    assert old in GOOD
    assert _fp(GOOD.replace(old, new)) != _fp(GOOD)


def test_fingerprint_changes_with_frames():
    base = _fp(GOOD)
    assert _fp(GOOD, FRAMES[:2]) != base
    assert _fp(GOOD, [*FRAMES, "000003"]) != base
    assert _fp(GOOD, list(reversed(FRAMES))) != base
    assert _fp(GOOD, ["000000", "000001", "000003"]) != base


def test_fingerprint_changes_with_stage_version():
    r = parse_recipe(GOOD, origin=ORIGIN)
    c = r.corruptions[0]
    bumped = dataclasses.replace(r, corruptions=(dataclasses.replace(c, stage_version=c.stage_version + 1),
                                                 *r.corruptions[1:]))
    assert bumped.fingerprint(FRAMES) != r.fingerprint(FRAMES)


def test_fingerprint_handles_infinite_params():
    text = GOOD.replace("[100, 30, 10, 5, 3]", '[100, 30, 10, 5, "inf"]')
    assert _fp(text) == _fp(text) != _fp(GOOD)


def test_examples_defined(kitti_c):
    n = len(kitti_c.corruptions)
    assert kitti_c.examples_defined(7481) == 7481 * n * 6
    assert kitti_c.examples_stored(7481) == 7481 * (1 + n * 5)
    # the full KITTI-C: 7,481 scenes × 25 corruptions × 6 severities
    c0 = kitti_c.corruptions[0]
    full = dataclasses.replace(kitti_c, corruptions=tuple(dataclasses.replace(c0, name=f"c{i}") for i in range(25)))
    assert full.examples_defined(7481) == 1_122_150


VARIANT_RECIPE = """
[benchmark]
name = "toy"
version = "1"
seed = 1
source = "kitti"
severities = 2

[corruptions.g]
stage = "gaussian_rad"
sigma = [0.1, 0.2]
notes = "code"

[variants.text]
description = "the paper"
[variants.text.corruptions.g]
rule = "text"
notes = "paper"
"""


def test_variant_overrides_only_its_keys_and_renames_the_benchmark():
    base = parse_recipe(VARIANT_RECIPE)
    text = parse_recipe(VARIANT_RECIPE, variant="text")
    assert (base.name, base.variant, text.name, text.variant) == ("toy", None, "toy-text", "text")
    assert [p.sigma for p in text.corruption("g").params] == [0.1, 0.2]
    assert {p.rule for p in base.corruption("g").params} == {"code"}
    assert {p.rule for p in text.corruption("g").params} == {"text"}
    assert text.corruption("g").notes == "paper"
    info = base.variants["text"]
    assert info.changes == {"g": {"rule": (None, "text")}} and info.notes == {"g": ("code", "paper")}
    assert base.fingerprint(["a"]) != text.fingerprint(["a"])


def test_variant_errors_name_the_problem(tmp_path):
    with pytest.raises(RecipeError, match="no variant 'nope'"):
        parse_recipe(VARIANT_RECIPE, variant="nope")
    with pytest.raises(RecipeError, match=r"corruptions \['h'\] are not in the recipe"):
        parse_recipe(VARIANT_RECIPE.replace("corruptions.g]\nrule", "corruptions.h]\nrule"))
    with pytest.raises(RecipeError, match="unknown parameter"):  # a typo in a variant fails the default too
        parse_recipe(VARIANT_RECIPE.replace('rule = "text"', 'rulez = "text"'))
    path = tmp_path / "toy.toml"
    path.write_text(VARIANT_RECIPE)
    assert load_recipe(f"{path}:text").name == "toy-text"


# ---- safe names and bounds (issue 29) ------------------------------------------------------------------------

def _fog_recipe(alphas: int) -> str:
    """A recipe whose fog table list (shared by every severity, so never compared with `severities`) has
    ``alphas`` entries."""
    return BENCH.replace("severities = 5", "severities = 2") + (
        '[corruptions.fog]\nstage = "fog"\nbeta = [0.01, 0.02]\n'
        f"table_alphas = [{', '.join(['0.01'] * alphas)}]\n")


@pytest.mark.parametrize(("edit", "message"), [
    (("[corruptions.beam_del]", '[corruptions."a/b"]'), r"corruptions\] name 'a/b' contains '/'"),
    (("[corruptions.beam_del]", '[corruptions."../x"]'), r"corruptions\] name '../x' contains '..'"),
    (("[corruptions.beam_del]", '[corruptions."a=b"]'), r"corruptions\] name 'a=b' contains '='"),
    (("[corruptions.beam_del]", '[corruptions."a\\\\b"]'), r"corruptions\] name 'a\\\\b' contains '\\\\'"),
    (("[corruptions.beam_del]", '[corruptions."a\\u0007b"]'), r"contains U\+0007 \(a control character\)"),
    (("[corruptions.beam_del]", '[corruptions.""]'), r"corruptions\] name '' is empty"),
    (("[corruptions.beam_del]", '[corruptions."  "]'), r"name '  ' is only whitespace"),
    (("[corruptions.beam_del]", '[corruptions.".hidden"]'), r"name '.hidden' starts with '.'"),
    (("[corruptions.beam_del]", f'[corruptions.{"x" * 129}]'), r"is 129 characters long \(at most 128\)"),
    (('name = "tiny"', 'name = "../tiny"'), r"\[benchmark\] name '../tiny' contains '..'"),
    (('version = "0.1.0"', 'version = "0.1/0"'), r"\[benchmark\] version '0.1/0' contains '/'"),
    (("severities = 5", 'severities = 5\nseverity_names = ["a", "b", "c d", "e", "f"]'),
     r"severity_names entry 'c d' contains U\+0020 \(space\)"),
    (("severities = 5", "severities = 10000"), r"severities = 10000 is more than 20"),
])
def test_unsafe_names_and_oversized_recipes_are_refused_naming_file_and_field(edit, message):
    with pytest.raises(RecipeError, match=rf"^{ORIGIN}: .*{message}"):
        parse_recipe(GOOD.replace(*edit), origin=ORIGIN)


def test_parameter_sizes_are_bounded():
    from bench_build.manifests.recipe import MAX_PARAM_CHARS, MAX_PARAM_ITEMS

    assert len(parse_recipe(_fog_recipe(MAX_PARAM_ITEMS), origin=ORIGIN).corruption("fog").params[0]
               .table_alphas) == MAX_PARAM_ITEMS
    with pytest.raises(RecipeError, match=rf"^{ORIGIN}: corruption 'fog': parameter 'table_alphas' is a list of "
                                          rf"{MAX_PARAM_ITEMS + 1} values \(at most {MAX_PARAM_ITEMS}\)"):
        parse_recipe(_fog_recipe(MAX_PARAM_ITEMS + 1), origin=ORIGIN)
    long = "x" * (MAX_PARAM_CHARS + 1)
    with pytest.raises(RecipeError, match=rf"parameter 'noise_variant' is a string of {MAX_PARAM_CHARS + 1} "
                                          rf"characters \(at most {MAX_PARAM_CHARS}\)"):
        parse_recipe(_fog_recipe(2) + f'noise_variant = "{long}"\n', origin=ORIGIN)
    with pytest.raises(RecipeError, match=r"corruption 'g': stage 'a/b' contains '/'"):
        parse_recipe(BENCH + '[corruptions.g]\nstage = "a/b"\n', origin=ORIGIN)


def test_every_builtin_recipe_is_within_the_rules():
    """The bounds sit well above the built-ins, so none of them (nor a variant) is refused."""
    from bench_build.manifests.names import frame_id_problem, name_problem
    from bench_build.manifests.recipe import MAX_SEVERITIES, builtin_recipes

    for name in builtin_recipes():
        recipe = load_recipe(name)
        assert recipe.severities <= MAX_SEVERITIES // 4, name
        for n in (recipe.name, recipe.version, *recipe.severity_names,
                  *(c.name for c in recipe.corruptions), *(c.stage for c in recipe.corruptions)):
            assert name_problem(n) is None, (name, n)
        for variant in recipe.variants:
            assert name_problem(load_recipe(f"{name}:{variant}").name) is None
    # the sources' own id shapes (KITTI, ModelNet, ShapeNet, 3DOS, SemanticKITTI, Waymo, nuScenes) are safe
    for fid in ("000042", "test/00042", "02691156/1a04e3eab45ca15dd86060f189eb133",
                "SN1/test/shapenet/02691156/1a04e3eab45ca15dd86060f189eb133", "08_000000",
                "10017090168044687777_6380_000_6400_000-1550083467346370", "ca9a282c9e77460f8360f564131a8af5"):
        assert frame_id_problem(fid) is None, fid
    for fid, why in (("../../etc/passwd", "has a part '..'"), ("/etc/passwd", "contains '/'"),
                     ("a//b", "contains '/'"), ("a=b", "contains '='"), ("", "is empty"), ("x" * 513, "513")):
        assert why in (frame_id_problem(fid) or ""), fid


def test_manifest_safe_name_is_the_same_rule():
    import itertools

    from bench_build.manifests.manifest import SAFE_NAME
    from bench_build.manifests.names import frame_id_problem, name_problem

    for n in ("kitti-c", "1.0.0", "a..b", "a/b", ".x", "x" * 128, "x" * 129, "ok\n", "a=b", "v1+local"):
        assert bool(SAFE_NAME.match(n)) == (name_problem(n) is None), n
    # the regex fast paths and the worded checks agree on every short string over a telling alphabet
    for k in range(1, 5):
        for chars in itertools.product("a.-/=\n ", repeat=k):
            s = "".join(chars)
            safe = all(c in "a.-" for c in s) and s[0] == "a" and ".." not in s
            assert (name_problem(s) is None) == safe, s
            parts = s.split("/")
            assert (frame_id_problem(s) is None) == all(name_problem(p) is None for p in parts), s


_BASE = ('[benchmark]\nname = "x"\nversion = "0.1.0"\nseed = 1\nsource = "kitti"\nseverities = 1\n'
         '[corruptions.g]\nstage = "gaussian_rad"\nsigma = 0.1\n')


@pytest.mark.parametrize(("extra", "said"), [
    ('[preprocesss]\nstage = "object_sample"\n', "top level: unknown table or key 'preprocesss'; did you mean "
                                                  "'preprocess'?"),
    ("[options]\nframe_per_shard = 8\n", "[options] unknown key 'frame_per_shard'; did you mean 'frames_per_shard'?"),
    ("[sources_options]\nsplit = 1\n", "unknown table or key 'sources_options'; did you mean 'source_options'?"),
    ("[extras]\na = 1\n", "unknown table or key 'extras' (known: benchmark, corruptions, preprocess, options"),
])
def test_a_misspelt_table_or_option_is_refused_not_ignored(extra, said):
    """A misspelt table or option used to be ignored: ModelNet-C with [preprocesss] stored 2,048 points instead of
    1,024, and [options] frame_per_shard left the shard size at 64, with no word."""
    with pytest.raises(RecipeError) as e:
        parse_recipe(_BASE + extra, origin="r.toml")
    assert str(e.value).startswith("r.toml: ") and said in str(e.value)
    assert parse_recipe(_BASE + "[options]\nframes_per_shard = 8\n").frames_per_shard == 8


@pytest.mark.parametrize(("entry", "said"), [
    ('rule = "cod"\n', "parameter 'rule' (severity 1) must be one of ('code', 'text'), got 'cod'"),
    ('rule = ["code", "txt"]\n', "parameter 'rule' (severity 2) must be one of ('code', 'text'), got 'txt'"),
])
def test_a_misspelt_rule_is_refused_at_load_not_in_the_worker(entry, said):
    """Every stage checks its `rule` only when it runs: `rule = "cod"` loaded, `run` started Ray and wrote the build
    folder, and each shard failed in its worker (exit 1) instead of a refusal before any work (exit 2)."""
    text = _BASE.replace("severities = 1", "severities = 2") + entry
    with pytest.raises(RecipeError) as e:
        parse_recipe(text, origin="r.toml")
    assert str(e.value) == f"r.toml: corruption 'g': {said}"
    assert parse_recipe(text.replace(entry, 'rule = ["code", "text"]\n')).corruption("g").params[1].rule == "text"


def test_frames_per_shard_true_is_refused_not_read_as_one():
    """`frames_per_shard = true` passed as the integer 1 (a bool is an int in Python): a shard per frame, silently."""
    with pytest.raises(RecipeError, match=r"^r\.toml: \[options\] frames_per_shard must be a positive integer, got "
                                          r"True$"):
        parse_recipe(_BASE + "[options]\nframes_per_shard = true\n", origin="r.toml")


def test_a_recipe_that_is_not_utf8_is_one_line_naming_the_file(tmp_path):
    """A Latin-1 byte in a recipe escaped as a UnicodeDecodeError traceback (exit 1) instead of a refusal."""
    path = tmp_path / "my.toml"
    path.write_bytes(_BASE.replace('"x"', '"caf\xe9"').encode("latin-1"))
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert str(e.value) == f"{path}: not UTF-8 text (line 2, byte b'\\xe9'); a TOML recipe must be UTF-8"


@pytest.mark.parametrize(("recipe", "old", "new", "said"), [
    ("modelnet-c", 'outside = "invert"', 'outside = "inverse"',
     "object_add_local: outside must be one of ('invert', 'keep'), got 'inverse'"),
    ("modelnet-c", 'method = "first"', 'method = "fps"', "object_sample: method must be one of ('first', 'random'), "
                                                          "got 'fps'"),
    ("3dos", 'normalize = "sphere"', 'normalize = "ball"',
     "object_sample: normalize must be one of ('none', 'sphere', 'cube'), got 'ball'"),
])
def test_a_misspelt_choice_of_an_object_stage_is_refused_at_load(recipe, old, new, said):
    """Like `rule`, these were checked only when the stage ran, in a worker: each shard failed (exit 1) with
    "bad parameters" instead of a refusal naming the parameter before any work."""
    from bench_build.manifests.recipe import builtin_recipes

    text = builtin_recipes()[recipe].read_text()
    assert old in text
    with pytest.raises(RecipeError) as e:
        parse_recipe(text.replace(old, new, 1), origin="r.toml")
    assert said in str(e.value) and str(e.value).startswith("r.toml: ")


# ---- seed range and free text ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["18446744073709551616", "9223372036854775808", "-1", "true", "1.5", '"7"'])
def test_seed_outside_tomls_integer_range_or_not_an_integer_is_refused(bad):
    msg = _error(GOOD.replace("seed = 7", f"seed = {bad}"))
    assert "[benchmark] seed must be a non-negative integer of at most 2**63 - 1" in msg


def test_largest_seed_loads_and_seeds():
    from bench_build.manifests.recipe import MAX_SEED
    from bench_build.plan.tasks import example_rng

    r = parse_recipe(GOOD.replace("seed = 7", f"seed = {MAX_SEED}"), origin=ORIGIN)
    assert r.seed == MAX_SEED == 2**63 - 1
    assert example_rng(r.seed, "tiny/000000/gaussian_rad/1").integers(1 << 30) >= 0


@pytest.mark.parametrize(("edit", "where"), [
    (("severities = 5", "severities = 5\ndescription = 3"), "[benchmark] description"),
    (("severities = 5", "severities = 5\npaper = [1, 2]"), "[benchmark] paper"),
    (('stage = "beam_del"', 'stage = "beam_del"\nnotes = 1.5'), "corruption 'beam_del': notes"),
    (('stage = "beam_del"', 'stage = "beam_del"\nnotes = false'), "corruption 'beam_del': notes"),
])
def test_non_string_notes_and_description_are_refused(edit, where):
    msg = _error(GOOD.replace(*edit))
    assert f"{where} must be a string" in msg


@pytest.mark.parametrize("bad", ["5", "true", '["test"]', '""'])
def test_a_split_that_is_not_a_name_is_refused_at_load(bad):
    """A number, list or empty string as the split loaded and reached the source reader, which cannot name it."""
    msg = _error(GOOD.replace("severities = 5", f"severities = 5\nsplit = {bad}"))
    assert "[benchmark] split must be a split name in quotes" in msg


@pytest.mark.parametrize(("edit", "where"), [
    (('description = "the paper"', "description = 2"), "[variants.text] description"),
    (('notes = "paper"', "notes = { a = 1 }"), "[variants.text.corruptions.g] notes"),
    (('notes = "code"', "notes = 12"), "corruption 'g': notes"),
])
def test_non_string_variant_texts_are_refused(edit, where):
    with pytest.raises(RecipeError) as e:
        parse_recipe(VARIANT_RECIPE.replace(*edit), origin=ORIGIN)
    assert str(e.value).startswith(f"{ORIGIN}: {where} must be a string")


@pytest.mark.parametrize("bad", ["5", "true", '["toy-x"]', "{ a = 1 }", '""'])
def test_a_variant_name_that_is_not_a_string_is_refused_at_load(tmp_path, bad):
    """str() made `name = 5` the benchmark "5" (a build into OUT/5/), `name = true` the benchmark "True"."""
    path = tmp_path / "toy.toml"
    path.write_text(VARIANT_RECIPE.replace('description = "the paper"', f'description = "the paper"\nname = {bad}'))
    for spec in (path, f"{path}:text"):
        with pytest.raises(RecipeError) as e:
            load_recipe(spec)
        assert str(e.value) == (f"{path}: [variants.text]: name must be the variant's benchmark name in quotes "
                                f"(e.g. \"toy-text\"), got {tomllib.loads('v = ' + bad)['v']!r}")
    path.write_text(VARIANT_RECIPE.replace('description = "the paper"', 'description = "the paper"\nname = "toy-t"'))
    assert load_recipe(f"{path}:text").name == "toy-t"


SNOW = BENCH.replace("severities = 5", "severities = 2") + (
    '[corruptions.snowy]\nstage = "snow"\nrate = [0.5, 1.0]\nterminal_velocity = 1.2\n')


@pytest.mark.parametrize(("value", "severity"), [
    ("9223372036854775808", 1), ("18446744073709551616", 1), ("[42, 9223372036854775808]", 2), ("-1", 1)])
def test_a_stage_seed_outside_tomls_integer_range_is_refused_at_load(value, severity):
    """pool_seed had no upper bound: 2**64 loaded (Python's TOML reader takes any integer) and seeded the pool."""
    got = tomllib.loads(f"v = {value}")["v"]
    got = got[severity - 1] if isinstance(got, list) else got
    with pytest.raises(RecipeError) as e:
        parse_recipe(SNOW + f"pool_seed = {value}\n", origin=ORIGIN)
    assert str(e.value) == (f"{ORIGIN}: corruption 'snowy': parameter 'pool_seed' of stage snow (severity {severity}) "
                            f"must be an integer in 0 … 2**63 - 1 (9223372036854775807, TOML's largest integer), "
                            f"got {got!r}")


def test_the_largest_stage_seed_loads_and_one_more_is_refused_in_preprocess_too():
    from bench_build.manifests.recipe import MAX_SEED

    r = parse_recipe(SNOW + f"pool_seed = [0, {MAX_SEED}]\n", origin=ORIGIN)
    assert [p.pool_seed for p in r.corruption("snowy").params] == [0, MAX_SEED]
    pre = GOOD + '[preprocess]\nstage = "snow"\nrate = 1.0\nterminal_velocity = 1.2\npool_seed = {}\n'
    assert parse_recipe(pre.format(MAX_SEED), origin=ORIGIN).preprocess.params[0].pool_seed == MAX_SEED
    with pytest.raises(RecipeError, match=r"^my.toml: \[preprocess\]: parameter 'pool_seed' of stage snow \(severity "
                                          r"1\) must be an integer in 0 … 2\*\*63 - 1 .*, got 9223372036854775808$"):
        parse_recipe(pre.format(MAX_SEED + 1), origin=ORIGIN)


def test_a_stages_parameter_types_are_resolved_once_per_process(monkeypatch):
    """`typing.get_type_hints` evaluates every annotation of a stage's parameters on each call, and was over half of
    parsing a recipe, which a build's driver does ≈ 9 times: it is called once per stage, whatever the parses."""
    import typing

    from bench_build.manifests import recipe as recipe_module

    if clear := getattr(getattr(recipe_module, "_type_hints", None), "cache_clear", None):
        clear()  # this process's earlier parses resolved them already
    calls: list[type] = []
    real = typing.get_type_hints

    def counted(obj, *a, **k):
        calls.append(obj)
        return real(obj, *a, **k)

    monkeypatch.setattr(typing, "get_type_hints", counted)
    first = parse_recipe(GOOD, origin=ORIGIN)
    assert len(calls) == len(set(calls)) == 3  # gaussian_rad, beam_del, translation: one each
    again = parse_recipe(GOOD, origin=ORIGIN)
    assert len(calls) == 3 and again == first
