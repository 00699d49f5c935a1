import { test } from 'node:test';
import assert from 'node:assert/strict';
import { toCall, CountersignError } from '@countersign/client';

test('an OpenAI Chat Completions tool call becomes {id, name, arguments}', () => {
  assert.deepEqual(toCall({ id: 'call_1', type: 'function', function: { name: 'payments_send', arguments: '{"amount":5,"to":"ACME"}' } }), {
    id: 'call_1',
    name: 'payments_send',
    arguments: { amount: 5, to: 'ACME' },
  });
});

test('an Anthropic tool_use block becomes {id, name, arguments}', () => {
  assert.deepEqual(toCall({ type: 'tool_use', id: 'toolu_1', name: 'payments.send', input: { amount: 5 } }), {
    id: 'toolu_1',
    name: 'payments.send',
    arguments: { amount: 5 },
  });
});

test('an OpenAI Responses function_call and Countersign\'s own shape are accepted', () => {
  assert.deepEqual(toCall({ type: 'function_call', call_id: 'fc_1', name: 'x', arguments: '{}' }), { id: 'fc_1', name: 'x', arguments: {} });
  assert.deepEqual(toCall({ id: 'c', name: 'x', arguments: { a: 1 } }), { id: 'c', name: 'x', arguments: { a: 1 } });
  assert.deepEqual(toCall({ id: 'c', type: 'function', function: { name: 'x', arguments: '' } }), { id: 'c', name: 'x', arguments: {} });
});

test('arguments that are not a JSON object, or an unknown shape, are a CountersignError with a code and field', () => {
  const check = (call: unknown, code: string, field: string) =>
    assert.throws(() => toCall(call as never), (err: unknown) => err instanceof CountersignError && err.code === code && err.field === field);
  check({ id: 'c', type: 'function', function: { name: 'x', arguments: '{"amount":' } }, 'invalid_arguments', 'function.arguments');
  check({ id: 'c', type: 'function', function: { name: 'x', arguments: '[1,2]' } }, 'invalid_arguments', 'function.arguments');
  check({ type: 'tool_use', id: 't', name: 'x', input: 'text' }, 'invalid_arguments', 'input');
  check({ type: 'image', id: 't' }, 'invalid_tool_call', 'type');
  check({ id: 'c', arguments: {} }, 'invalid_tool_call', 'name');
});
