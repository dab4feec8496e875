"""The labelling workflow as a person uses it: `labels pending` writes the unlabelled pairs,
they fill in `kept`, `labels import` appends what still matches the current pairs (refusing
stale and unknown lines, one line each), and `labels status` says what it takes to check
the transform, exactly as the validity rule decides it."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from helpers import oloproof
from oloproof_pipeline.decide.validity import transform_validity
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.transforms import derive_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.read.labelling import (
    import_labels,
    kept_labels_to_check,
    label_status,
    pairs_of,
    pending_pairs,
    pending_text,
    write_pending,
)
from oloproof_pipeline.store.tables import derived_case_table



def words(text: str) -> str:
    """The output with its wrapping undone."""
    return " ".join(text.split())


def retire_paraphrase_labels(root: Path) -> None:
    """A new version of the transform: every label written for the old one stops counting."""
    config = root / "oloproof.yaml"
    config.write_text(config.read_text().replace("- name: paraphrase\n", "- name: paraphrase\n      version: 2\n"))


def pipeline_validity(root: Path) -> dict:
    """The validity rule on the copies as the pipeline's derived_cases asset derives them."""
    project = load_project(root)
    return transform_validity(derived_case_table(derive_cases(project, load_cases(project)).copies))


def fill_csv(path: Path, kept_for) -> None:
    """A person's edit of the pending CSV: `kept` filled per row (None leaves it blank)."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        rows, names = list(reader), reader.fieldnames
    for index, row in enumerate(rows):
        kept = kept_for(index)
        row["kept"] = "" if kept is None else kept
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)


def test_pending_then_import_checks_the_transform_through_the_cli(refund_desk):
    labels_file = refund_desk / "labels" / "paraphrase.jsonl"
    original = labels_file.read_text()
    old_line = json.loads(original.splitlines()[0])
    retire_paraphrase_labels(refund_desk)

    before = {status.transform: status for status in label_status(load_project(refund_desk))}
    assert before["injected"].checked and before["injected"].kept_to_check == 0
    assert (before["paraphrase"].unlabelled, before["paraphrase"].stale, before["paraphrase"].kept_to_check) == (24, 24, 24)

    pending = oloproof("labels", "pending", "paraphrase", "--format", "csv", cwd=refund_desk, columns=120)
    assert pending.returncode == 0, pending.stderr
    pending_file = refund_desk / "labels" / "paraphrase.pending.csv"
    assert f"Wrote 24 pending pairs of paraphrase to {pending_file}" in words(pending.stdout)  # a long path gets its own line
    with pending_file.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["case"] for row in rows] == [f"ord-{number:03d}~paraphrase" for number in range(1, 25)]
    assert all("reimburse" in row["copy_text"].lower() or "returned" in row["copy_text"] for row in rows)
    assert all(row["source_text"] != row["copy_text"] and not row["kept"] for row in rows)
    digests = {row["case"]: row["digest"] for row in rows}

    # The person keeps 23 pairs and leaves the last blank; two lines they pasted from elsewhere
    # are stale (a label of the old transform version) and unknown.
    fill_csv(pending_file, lambda index: None if index == 23 else "true")
    first_added = len(pending_file.read_text().splitlines()) + 1  # a message may span lines
    with pending_file.open("a", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([old_line["case"], "true", "", "", "", old_line["digest"]])
        writer.writerow(["ord-777~paraphrase", "yes", "", "", "", "sha256:" + "0" * 64])
    imported = oloproof("labels", "import", str(pending_file), cwd=refund_desk, columns=120)
    assert imported.returncode == 2, imported.stdout + imported.stderr
    refused = [line for line in imported.stderr.splitlines() if line.startswith("refused:")]
    assert len(refused) == 2
    assert refused[0].startswith(f"refused: {pending_file}:{first_added}: digest: stale:")
    assert refused[1].startswith(f"refused: {pending_file}:{first_added + 1}: digest: unknown:")
    assert f"Appended 23 labels to {labels_file}" in words(imported.stdout)
    assert "1 line not filled in (kept blank)" in words(imported.stdout)
    assert "2 lines refused (the others were imported)" in imported.stderr

    # Nothing already recorded is lost or rewritten; what was appended reads as labels.
    text = labels_file.read_text()
    assert text.startswith(original) and len(text.splitlines()) == 24 + 23
    appended = [json.loads(line) for line in text.splitlines()[24:]]
    assert all(line["kept"] is True and line["digest"] == digests[line["case"]] for line in appended)
    validity = pipeline_validity(refund_desk)["paraphrase"]
    assert (validity.kept, validity.unlabelled, validity.stale_labels, validity.checked) == (23, 1, 24, False)

    # Importing the same file again appends nothing.
    again = import_labels(load_project(refund_desk), pending_file)
    assert (again.appended, again.already_labelled, len(again.refused)) == ({}, 23, 2) and labels_file.read_text() == text
    assert label_status(load_project(refund_desk))[0].kept_to_check == 1

    # The last pair, as JSON lines this time: afterwards the transform is checked.
    last = refund_desk / "last.jsonl"
    write_pending(last, pending_text(pending_pairs(pairs_of(load_project(refund_desk), "paraphrase")), "jsonl"))
    line = json.loads(last.read_text())
    assert line["case"] == "ord-024~paraphrase" and line["kept"] is None and line["digest"] == digests[line["case"]]
    last.write_text(json.dumps({**line, "kept": True, "note": "same request"}) + "\n")
    finished = oloproof("labels", "import", str(last), cwd=refund_desk, columns=120)
    assert finished.returncode == 0, finished.stderr
    assert json.loads(labels_file.read_text().splitlines()[-1]) == {
        "case": "ord-024~paraphrase", "digest": line["digest"], "kept": True, "note": "same request"
    }
    assert pipeline_validity(refund_desk)["paraphrase"].checked

    status = oloproof("labels", "status", cwd=refund_desk, columns=80)
    assert status.returncode == 0
    assert "paraphrase: 24 of 24 pairs kept" in words(status.stdout) and ": checked" in status.stdout
    assert all(len(line.rstrip()) <= 80 for line in status.stdout.splitlines())
    assert re.search(r"paraphrase +24 +24 +0 +0 +24 +yes", status.stdout)  # pairs kept rejected unlabelled stale
    assert pending_pairs(pairs_of(load_project(refund_desk), "paraphrase")) == []


def validity_of(kept: int, rejected: int, unlabelled: int, minimum: float):
    """The validity rule's verdict for these counts, from a derived_cases-shaped table."""
    statuses = ["kept"] * kept + ["rejected"] * rejected + ["unlabelled"] * unlabelled
    frame = pd.DataFrame({
        "transform": "t", "transform_digest": "sha256:" + "1" * 64, "label_status": statuses,
        "stale_labels": 0, "minimum_validity": minimum,
    })
    return transform_validity(frame)["t"]


@pytest.mark.parametrize("pairs", [1, 5, 24, 60, 300])
@pytest.mark.parametrize("minimum", [0.0, 0.5, 0.85, 0.95, 0.99])
def test_further_kept_labels_is_the_exact_number_the_validity_rule_needs(pairs, minimum):
    for rejected in sorted({0, 1, pairs // 10}):
        for kept in sorted({0, pairs // 2, pairs - rejected}):
            if kept + rejected > pairs:
                continue
            unlabelled = pairs - kept - rejected
            needed = kept_labels_to_check(validity_of(kept, rejected, unlabelled, minimum))
            if needed is None:  # every unlabelled pair kept still does not check it
                assert not validity_of(kept + unlabelled, rejected, 0, minimum).checked
                continue
            assert validity_of(kept + needed, rejected, unlabelled - needed, minimum).checked
            if needed:
                assert not validity_of(kept + needed - 1, rejected, unlabelled - needed + 1, minimum).checked


def test_each_refused_line_names_file_line_and_field_and_the_rest_are_imported(refund_desk):
    retire_paraphrase_labels(refund_desk)
    project = load_project(refund_desk)
    pending = pending_pairs(pairs_of(project, "paraphrase"))
    good, blank, other = (item.model_dump() for item in pending[:3])
    filled = refund_desk / "filled.jsonl"
    lines = [
        json.dumps({**good, "kept": "no"}),
        "{not json",
        json.dumps({**blank, "kept": None}),
        json.dumps({**other, "kept": "maybe"}),
        json.dumps({**other, "case": "ord-009~paraphrase", "kept": True}),
        json.dumps({**other, "digest": None, "kept": True}),
        json.dumps(["a", "list"]),
    ]
    filled.write_text("\n".join(lines) + "\n")
    outcome = import_labels(project, filled)
    assert outcome.appended == {refund_desk / "labels" / "paraphrase.jsonl": 1} and outcome.unfilled == 1
    assert [line.split(": ")[0:2] for line in outcome.refused] == [
        [f"{filled}:2", "invalid JSON"],
        [f"{filled}:4", "kept"],
        [f"{filled}:5", "case"],
        [f"{filled}:6", "digest"],
        [f"{filled}:7", "expected a JSON object, got list"],
    ]
    assert all("\n" not in line for line in outcome.refused)
    assert label_status(project)[0].rejected == 1  # "no" was read as a rejection

    # A second person keeps the pair the first rejected: appended, and the pair stays rejected.
    second = refund_desk / "second.jsonl"
    second.write_text(json.dumps({**good, "kept": True}) + "\n")
    outcome = import_labels(project, second)
    assert (outcome.appended_total, outcome.disagreeing, label_status(project)[0].rejected) == (1, 1, 1)


def test_import_creates_a_missing_labels_file_and_completes_a_cut_last_line(refund_desk):
    injected = refund_desk / "labels" / "injected.jsonl"
    paraphrase = refund_desk / "labels" / "paraphrase.jsonl"
    injected.unlink()
    paraphrase.write_text(paraphrase.read_text().rstrip("\n"))  # saved without a final newline
    retire_paraphrase_labels(refund_desk)
    project = load_project(refund_desk)
    for name in ("injected", "paraphrase"):
        pending = pending_pairs(pairs_of(project, name))
        assert len(pending) == 24
        path = refund_desk / f"{name}.pending.jsonl"
        write_pending(path, pending_text([item.model_copy(update={"kept": True}) for item in pending], "jsonl"))
        with pytest.raises(ProjectError, match="already exists"):  # a filled file is never overwritten
            write_pending(path, pending_text(pending, "jsonl"))
        import_labels(project, path)
    validity = pipeline_validity(refund_desk)
    assert validity["injected"].checked and validity["paraphrase"].checked
    assert len(paraphrase.read_text().splitlines()) == 48
