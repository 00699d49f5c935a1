/** One server-sent event. */
export interface ServerEvent {
  event: string;
  id: string | undefined;
  data: string;
}

/**
 * parseEvents reads a text/event-stream body and yields its events, per the
 * HTML standard's rules: fields `event`, `data` (lines joined with "\n"),
 * `id`; comments and `retry` are skipped; an event is dispatched at a blank
 * line, and one without data is dropped.
 */
export async function* parseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<ServerEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let event = '';
  let data: string[] = [];
  let id: string | undefined;
  let sawData = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      for (;;) {
        const m = /\r\n|\r|\n/.exec(buf);
        if (!m) break;
        // A lone "\r" at the end of the buffer may be the first half of "\r\n".
        if (m[0] === '\r' && m.index === buf.length - 1) break;
        const line = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        if (line === '') {
          if (sawData) yield { event: event || 'message', id, data: data.join('\n') };
          event = '';
          data = [];
          sawData = false;
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? '' : line.slice(colon + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        switch (field) {
          case 'event':
            event = val;
            break;
          case 'data':
            data.push(val);
            sawData = true;
            break;
          case 'id':
            if (!val.includes('\0')) id = val;
            break;
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}
