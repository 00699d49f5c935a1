// A payment service that runs a call only with a valid receipt: the
// receipt middleware of @countersign/client/receipts in front of a handler,
// keys from the test server's /.well-known/jwks.json. What it ran, and what
// it refused, are kept for the tests.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { RECEIPT_HEADER, receiptMiddleware, remoteKeys } from '@countersign/client/receipts';

export interface ReceiptTool {
  /** Calls the service as a tool would: the arguments as the JSON body, the receipt in its header. */
  pay(args: unknown, receipt: string | undefined): Promise<string>;
  /** The arguments of each call the service ran. */
  readonly ran: unknown[];
  /** The code of each call it refused. */
  readonly refused: string[];
  close(): Promise<void>;
}

export async function receiptTool(countersignUrl: string, tool = 'payments_send'): Promise<ReceiptTool> {
  const ran: unknown[] = [];
  const refused: string[] = [];
  const guard = receiptMiddleware({
    tool,
    keys: remoteKeys(new URL('/.well-known/jwks.json', countersignUrl)),
    onRefused: (_req, err) => refused.push(err.code),
  });
  const server = http.createServer((req, res) =>
    guard(req, res, () => {
      const body = (req as unknown as { body: unknown }).body;
      ran.push(body);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ paid: body }));
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/pay`;
  return {
    ran,
    refused,
    async pay(args, receipt) {
      const res = await fetch(url, {
        method: 'POST',
        body: JSON.stringify(args),
        headers: { 'content-type': 'application/json', ...(receipt ? { [RECEIPT_HEADER]: receipt } : {}) },
      });
      const text = await res.text();
      return `${res.status} ${text}`;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
