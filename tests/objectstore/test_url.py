"""An s3:// location is parsed once, and no key built from a checkpoint's or a scenario's names leaves it."""

import pytest

from resilience.errors import ConfigError
from resilience.objectstore import S3Location


def test_a_location_reads_back_and_builds_keys_under_its_prefix():
    loc = S3Location.parse("s3://ckpt-bucket/runs/a/")
    assert (loc.bucket, loc.prefix, str(loc)) == ("ckpt-bucket", "runs/a", "s3://ckpt-bucket/runs/a")
    assert loc.key("iter_0000002/__0_0.distcp") == "runs/a/iter_0000002/__0_0.distcp"
    assert loc.relative("runs/a/iter_0000002/manifest.json") == "iter_0000002/manifest.json"
    assert S3Location.parse("s3://bucket").key("x") == "x"


@pytest.mark.parametrize(
    "text, says",
    [
        ("/tmp/ckpt", "not an s3:// URL"),
        ("s3://", "not a valid S3 bucket name"),
        ("s3://Bucket/x", "not a valid S3 bucket name"),
        ("s3://ab/x", "not a valid S3 bucket name"),
        ("s3://192.168.1.1/x", "not a valid S3 bucket name"),
        ("s3://user@bucket/x", "more than a bucket and a prefix"),
        ("s3://bucket:9000/x", "more than a bucket and a prefix"),
        ("s3://bucket/x?versionId=1", "more than a bucket and a prefix"),
        ("s3://bucket/a/../../other", "escapes its prefix"),
        ("s3://bucket/a//b", "escapes its prefix"),
        ("s3://[bucket/x", "does not parse"),
    ],
)
def test_a_url_that_does_not_parse_is_one_error_with_the_fix(text, says):
    with pytest.raises(ConfigError) as e:
        S3Location.parse(text)
    assert e.value.field == "--storage" and says in str(e.value) and e.value.fix


@pytest.mark.parametrize("rel", ["../other/x", "a/../../x", "/abs", "a/./b", "a\\b", "a/\x00b", ""])
def test_a_key_that_escapes_the_prefix_is_refused(rel):
    with pytest.raises(ConfigError, match="escapes its prefix"):
        S3Location.parse("s3://bucket/run").key(rel)


def test_a_listed_key_outside_the_prefix_is_refused():
    loc = S3Location.parse("s3://bucket/run")
    for key in ("other/x", "run", "run/", "runx/y", "run/../x"):
        with pytest.raises(ConfigError):
            loc.relative(key)
