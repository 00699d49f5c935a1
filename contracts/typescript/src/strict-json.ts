/**
 * JSON reading for what a verifier trusts: an object that names a key twice
 * is refused, so two JSON readers never see different claims.
 */

/** 2^53−1 as decimal digits: the largest integer a double holds exactly. */
const MAX_SAFE_DIGITS = String(Number.MAX_SAFE_INTEGER);

/**
 * JSON.parse that refuses duplicate object keys and, unless
 * `safeIntegers` is false, an integer beyond ±(2^53−1).
 */
export function parseStrict(text: string, options?: { safeIntegers?: boolean }): unknown {
  checkDuplicates(text, options?.safeIntegers ?? true);
  return JSON.parse(text);
}

/**
 * A scan of the JSON text: a stack of key sets, one per open object. With
 * safeIntegers it also refuses an integer beyond ±(2^53−1), as the server
 * does: JSON.parse would round it to the double that was hashed, while a
 * handler that reads the text exactly would run another number.
 */
export function checkDuplicates(text: string, safeIntegers = true): void {
  const stack: (Set<string> | null)[] = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charAt(i);
    if (ch === '-' || (ch >= '0' && ch <= '9')) {
      let j = i;
      while (j < text.length && /[0-9+\-.eE]/.test(text.charAt(j))) j++;
      const tok = text.slice(i, j);
      if (safeIntegers && !/[.eE]/.test(tok)) {
        const digits = tok.replace(/^-?0*/, '');
        if (digits.length > MAX_SAFE_DIGITS.length || (digits.length === MAX_SAFE_DIGITS.length && digits > MAX_SAFE_DIGITS)) {
          throw new Error(`the integer ${tok} is beyond ±(2^53−1); a double would round it`);
        }
      }
      i = j - 1;
    } else if (ch === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      const raw = text.slice(i, j + 1);
      const top = stack[stack.length - 1];
      if (expectKey && top) {
        const key = JSON.parse(raw) as string;
        if (top.has(key)) throw new Error(`duplicate key ${raw}`);
        top.add(key);
      }
      expectKey = false;
      i = j;
    } else if (ch === '{') {
      stack.push(new Set());
      expectKey = true;
    } else if (ch === '[') {
      stack.push(null);
    } else if (ch === '}' || ch === ']') {
      stack.pop();
    } else if (ch === ',') {
      expectKey = stack[stack.length - 1] != null;
    }
  }
}
