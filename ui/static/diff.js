// diff.js: a line diff (longest common subsequence) for comparing spec
// versions. Specs are at most a few hundred lines as JSON; beyond
// MAX lines a side is compared as removed-then-added.
const MAX = 2000;

// diffLines returns [op, line] pairs, op one of " ", "-", "+".
export function diffLines(a, b) {
  if (a.length > MAX || b.length > MAX) return [...a.map((l) => ["-", l]), ...b.map((l) => ["+", l])];
  const n = a.length, m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([" ", a[i]]); i++; j++; }
    else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push(["-", a[i++]]);
    else out.push(["+", b[j++]]);
  }
  while (i < n) out.push(["-", a[i++]]);
  while (j < m) out.push(["+", b[j++]]);
  return out;
}
