// Prints a command as one shell-safe line (for DRY-RUN output and logs).

const SAFE_WORD = /^[A-Za-z0-9_@%+=:,./<>-]+$/;

/** ["versions", "upload", "a b"] -> "versions upload 'a b'" */
export function quoteWords(words) {
  return words.map((word) => (SAFE_WORD.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`)).join(" ");
}
