"""Print some columns of a CSV file (the docs' examples use it to show part of a wide answer).

    python3 columns.py predictions.csv llm gpu power_w
"""
import csv
import sys

path, *names = sys.argv[1:]
with open(path, newline="", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
print(f"{len(rows)} rows, {len(rows[0]) if rows else 0} columns; these:")
out = csv.writer(sys.stdout, lineterminator="\n")
out.writerow(names)
for row in rows:
    out.writerow([row[n] for n in names])
